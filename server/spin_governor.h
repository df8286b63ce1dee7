// Whether a loop with nothing to do keeps polling (spins) or parks.
//
// The spin (`--spin-us`) is for a client that waits on each answer before it sends its next
// call: a parked loop pays a thread wake-up for each such call, and the client waits for it
// (one connection, one call at a time: 29k -> 40k calls/s on h2). It buys nothing in two
// other kinds of idle, and costs the CPU of the whole gap:
// - A wake-up serves a wave of calls: many clients, or calls in flight, and a loop that
//   outruns them. The wake-up is shared by the wave; spinning through the gaps between waves
//   took 7.3 µs of server CPU a call under `h2load -c 50 -m 1` against 5.3-5.7 parked, which
//   costs that client 3-5% of its calls/s (BENCHMARKS.md).
// - The next call comes later than the spin lasts (a client at a few thousand calls a
//   second): each spin runs to its end and the loop parks anyway.
// So the governor keeps two averages over the last idle spells: the work a loop did between
// two of them (a busy spell), and how often a spell ended within the spin. It spins only while
// the busy spells are short and the spin would end in work. A parked spell counts too, from
// the last work to the next, so a loop that stopped spinning sees when spinning would pay
// again.
//
// Work is counted in the loop's units (server/loop_io.h: events, answers, engine requests):
// one call from a lone client is 2-3 of them.
//
// Loop thread only.
#ifndef RINGKV_SERVER_SPIN_GOVERNOR_H_
#define RINGKV_SERVER_SPIN_GOVERNOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ringkv {

class SpinGovernor {
 public:
  // Busy spells of more work than this on average (about three calls) share their wake-ups.
  static constexpr uint32_t kShortSpellWork = 8;

  explicit SpinGovernor(std::chrono::nanoseconds spin) : spin_(spin) {}

  // A turn did `work` (> 0). If the loop idled before it, `idle` is how long, from the previous
  // turn with work to this one; zero if it did not (or if its idle is not the clients': the
  // loop waited for the log, which then rang it).
  void OnWork(size_t work, std::chrono::nanoseconds idle) {
    if (idle.count() > 0) {
      // Averages with weight 1/8 for the newest spell, in fractions fine enough that their
      // rounding (towards zero) moves them by less than 1/32 of a unit.
      const int64_t spell = static_cast<int64_t>(spell_work_ < kSpellCap ? spell_work_ : kSpellCap);
      spell_work_avg_ += (spell * kOne - spell_work_avg_) / 8;
      const int64_t ended = idle < spin_ ? kOne : 0;
      ended_avg_ += (ended - ended_avg_) / 8;
      spell_work_ = 0;
    }
    spell_work_ += work;
  }

  // Whether the loop, idle now, should poll on for up to the spin. The bounds sit halfway
  // between whole units, so that spells of exactly kShortSpellWork units spin, and spells of
  // one more do not, whichever side the average comes from.
  bool ShouldSpin() const {
    return spin_.count() > 0 && spell_work_avg_ <= kShortSpellWork * kOne + kOne / 2 &&
           ended_avg_ >= kOne / 2;
  }

 private:
  // One spell's weight in the average is bounded, so one long busy spell (a loaded loop that
  // went idle once) is forgotten after a few short ones.
  static constexpr uint64_t kSpellCap = 256;
  // The averages' unit: 256ths.
  static constexpr int64_t kOne = 256;

  const std::chrono::nanoseconds spin_;
  uint64_t spell_work_ = 0;
  // Signed, so that the updates above can move either way. A new loop spins, as before it had
  // a governor, until its spells say otherwise.
  int64_t spell_work_avg_ = 0;
  int64_t ended_avg_ = kOne;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SPIN_GOVERNOR_H_
