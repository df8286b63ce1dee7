// Journal: where a shard records each change to its data as it makes it, so that the change can
// be made durable (persist/log_writer.h writes it to the worker's log). The shard calls Set,
// SetDeadline and Delete as it changes a key; the worker calls the rest once per turn. Records
// describe the key's state after the change, not the operation, so replaying them twice, or a
// prefix of them, gives a state the shard really had.
//
// Acknowledgement (holds_acks): a journal that must make records safe before their answers go
// (on disk with --fsync=always; handed to the kernel with everysec and no, so that a crash of
// the process loses no acknowledged write) numbers its records; the worker holds back the
// answer to a request that added records until durable() reaches the request's number, and
// keeps running other turns meanwhile.
//
// Threads: everything on the owning worker's thread.
#ifndef RINGKV_SHARD_JOURNAL_H_
#define RINGKV_SHARD_JOURNAL_H_

#include <cstdint>
#include <string_view>

namespace ringkv {

class Journal {
 public:
  virtual ~Journal() = default;

  // The key now holds `value` at `version`, with deadline `deadline_ms` (0: no TTL).
  virtual void Set(std::string_view key, std::string_view value, uint64_t version,
                   int64_t deadline_ms) = 0;
  // The key's deadline is now `deadline_ms` (0: no TTL); its value and version are unchanged.
  virtual void SetDeadline(std::string_view key, int64_t deadline_ms) = 0;
  // The key is gone (deleted or evicted).
  virtual void Delete(std::string_view key) = 0;
  // The key's deadline passed and the shard reclaimed it. A log need not record it (a replay
  // drops keys whose deadline has passed); a replication stream must (replicas never expire
  // keys on their own).
  virtual void Expired(std::string_view /*key*/) {}

  // Records so far; record n is covered by durable() >= n.
  virtual uint64_t appended() const = 0;
  // Records as safe as the journal promises before an answer (holds_acks journals only).
  virtual uint64_t durable() const = 0;
  // Whether answers to writes wait for durable().
  virtual bool holds_acks() const = 0;
  // End of a turn: hands what was recorded to the disk (one write and one sync cover it).
  virtual void Commit() = 0;
  // Whether the journal takes no more records, for good (the medium failed): writes must be
  // refused, and records not durable() yet never will be.
  virtual bool failed() const = 0;
  // Whether the medium is out of space for now: writes must be refused, but the records taken
  // already wait to be made durable (their answers held) until the journal recovers or fails.
  virtual bool stalled() const { return false; }
  // Whether so much is waiting for the disk that the worker should admit no new requests.
  virtual bool backlogged() const = 0;
  // A snapshot's cut (Worker::StartSnapshot): the records from now on go after it, to the
  // next segment of the log; the ones before it are covered by the snapshot.
  virtual void Cut() = 0;
};

}  // namespace ringkv

#endif  // RINGKV_SHARD_JOURNAL_H_
