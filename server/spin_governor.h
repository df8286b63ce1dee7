// Whether a loop with nothing to do keeps polling (spins) or parks.
//
// The spin (`--spin-us`) is for a client that waits on each answer before it sends its next
// call: a parked loop pays a thread wake-up for each such call, and the client waits for it
// (one connection, one call at a time: 29k -> 40k calls/s on h2). It buys nothing in two
// other kinds of idle, and costs the CPU of the whole gap:
// - A wake-up serves a wave of calls: many clients, or calls in flight, and a loop that
//   outruns them. The wake-up is shared by the wave; spinning through the gaps between waves
//   took 7.3 µs of server CPU a call under `h2load -c 50 -m 1` against 5.4 parked, at the same
//   calls/s.
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

  // A turn did `work` (> 0). If turns without work came before it, `idle` is how long they
  // lasted, from the previous turn with work to this one; else zero.
  void OnWork(size_t work, std::chrono::nanoseconds idle) {
    if (idle.count() > 0) {
      // An average with weight 1/8 for the newest spell, in sixteenths of a unit of work.
      const int64_t spell = static_cast<int64_t>(spell_work_ < kSpellCap ? spell_work_ : kSpellCap);
      spell_work_avg_ += (spell * 16 - spell_work_avg_) / 8;
      // In 256ths: 256 when every spell ended within the spin.
      const int32_t ended = idle < spin_ ? 256 : 0;
      ended_avg_ += (ended - ended_avg_) / 8;
      spell_work_ = 0;
    }
    spell_work_ += work;
  }

  // Whether the loop, idle now, should poll on for up to the spin.
  bool ShouldSpin() const {
    return spin_.count() > 0 && spell_work_avg_ <= int64_t{kShortSpellWork} * 16 &&
           ended_avg_ >= 128;
  }

 private:
  // One spell's weight in the average is bounded, so one long busy spell (a loaded loop that
  // went idle once) is forgotten after a few short ones.
  static constexpr uint64_t kSpellCap = 256;

  const std::chrono::nanoseconds spin_;
  uint64_t spell_work_ = 0;
  // Signed, so that the updates above can move either way. A new loop spins, as before it had
  // a governor, until its spells say otherwise.
  int64_t spell_work_avg_ = 0;
  int32_t ended_avg_ = 256;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_SPIN_GOVERNOR_H_
