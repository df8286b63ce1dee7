// Chunk and Handover: how a worker's replication records are kept for flows to read, and what a
// promoted replica's worker carries from its sink to its source (issue 23: a partial resync to
// a new primary).
//
// A primary keeps its last --repl-backlog bytes of records as chunks (server/repl/source.h); a
// replica keeps the same bytes of the records it applied (server/repl/sink.h). When a replica
// is promoted, its worker hands its sink's history, position and chunks to its source
// (server/repl/role_port.h), which goes on numbering from that position under a history of its
// own. A replica of the same old primary that stands at or behind that position, with its
// records still kept, then resumes from its position instead of a full sync: its data is a
// prefix of the same history. One that stands past it holds records the new primary never got,
// and full-syncs.
#ifndef RINGKV_SERVER_REPL_CHUNK_H_
#define RINGKV_SERVER_REPL_CHUNK_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

namespace ringkv::repl {

struct Chunk {
  uint64_t first = 0;  // The position of its first record.
  uint32_t count = 0;
  std::string records;     // Encoded as persist/format.h writes them.
  uint64_t end_bytes = 0;  // Bytes of records published up to its end, since the history began.
  int64_t made_ms = 0;     // The worker's clock (ms) when made (0: long ago) ...
  int64_t made_us = 0;     // ... and SystemClockUs, for the replicas' delays (0: unknown).
};

// The bytes of records in `chunks`.
inline size_t ChunkBytes(const std::deque<Chunk>& chunks) {
  size_t bytes = 0;
  for (const Chunk& c : chunks) bytes += c.records.size();
  return bytes;
}

// Drops the oldest of `chunks` while their records (`*bytes`) are over `limit`. The newest
// stays, whatever its size: a flow that keeps up never loses it.
inline void TrimChunks(std::deque<Chunk>* chunks, size_t* bytes, size_t limit) {
  while (*bytes > limit && chunks->size() > 1) {
    *bytes -= chunks->front().records.size();
    chunks->pop_front();
  }
}

struct Handover {
  std::string history;       // The history the shard's data is a prefix of ...
  uint64_t lsn = 0;          // ... up to this position (every record before it is applied).
  uint64_t bytes = 0;        // The history's bytes of records up to that position.
  std::deque<Chunk> chunks;  // The last records before `lsn`, in order, ending at it.
};

}  // namespace ringkv::repl

#endif  // RINGKV_SERVER_REPL_CHUNK_H_
