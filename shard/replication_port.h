// ReplicationPort: what a worker asks of replication (repl/), once per turn and for each
// Op::kReplicate request, so that everything replication touches on the worker runs on the
// worker's own thread and the data path takes no lock.
//
// A primary's port serves the flows of this worker's changes to replicas: a request that
// asks for what is not there yet (the next changes, the next part of a snapshot) is kept,
// and given back by a later Turn once it can be answered, or once it has waited long enough
// (its answer then says so), so that the caller's loop is never left without an answer.
// A replica's port applies, in Turn, what came from the primary to the worker's shard.
//
// Threads: the owning worker's thread only (each port says what else it does).
#ifndef RINGKV_SHARD_REPLICATION_PORT_H_
#define RINGKV_SHARD_REPLICATION_PORT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shard/clock.h"
#include "shard/request.h"

namespace ringkv {

class Shard;

class ReplicationPort {
 public:
  virtual ~ReplicationPort() = default;

  // An Op::kReplicate request for this worker: true if it is answered (its result set);
  // false if the port keeps it for a later Turn.
  virtual bool Serve(Request& request, Shard& shard, int64_t now_ms) = 0;
  // Once per turn, after the journal's commit: the kept requests that are answered now go to
  // `answered`; a replica's port applies what came. Returns the work done (0: none). `clock`
  // is read only when needed: this runs on every turn.
  virtual size_t Turn(Shard& shard, Clock clock, std::vector<Request*>* answered) = 0;
  // Whether the worker must not expire keys on its own (a replica: the primary's deletes do).
  virtual bool follows() const = 0;

  // Writes that wait for replicas (Request::replicas; a primary's port only). The worker asks
  // `in_sync` before it runs such a write (fewer replicas that can apply it: the write is
  // refused, Result::kTooFewReplicas), reads `position` after it (the write's repl_seq, if its
  // records moved it, which it passes to Expect), and hands its answer, once the journal no longer
  // holds it, to Await: true if the port keeps it, to give it back in a later Turn once `replicas`
  // replicas have applied everything up to repl_seq, or with Result::kNotReplicated once it has
  // waited
  // --min-replicas-timeout. The port clears repl_seq of what it gives back. A linearizable read
  // (Request::linearizable) is handed to Await too: true if writes wait, or a write that timed
  // out still lacks its replicas; the port keeps it until the writes before it are answered and
  // those records are acknowledged (or the timeout, as a write's).
  virtual uint32_t in_sync() const { return 0; }
  virtual uint64_t position() const { return 0; }
  // A write will wait for the replicas to apply the records before `repl_seq`: the port asks
  // them to say so as soon as they have.
  virtual void Expect(uint64_t /*repl_seq*/) {}
  virtual bool Await(Request& /*request*/) { return false; }
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_REPLICATION_PORT_H_
