// SendQueue: bytes on their way to a socket, in order: most are copied in, but a large buffer
// (a GET's value) can be shared instead, held by its shared_ptr where it lies until it is sent
// (base/shared_bytes.h: a buffer of its own, or a shard's record lent, which can move).
// Sending takes the front as iovecs for a sendmsg (kMaxIovecs pieces at a time), so a shared
// buffer reaches the kernel with no copy in user space; a queue of copied bytes alone is one
// contiguous piece, sent as before.
//
//   SendQueue q;
//   q.Append(header);                       // copied
//   q.Append(value, *value);                // shared: `value` is a SendQueue::Shared
//   iovec iov[SendQueue::kMaxIovecs];
//   ssize_t n = sendmsg(fd, ...q.Gather(iov)...);
//   if (n > 0) q.Consume(n);
//
// Pieces move between queues without copying what is shared (MoveTo: an HTTP/2 call's framed
// response into its connection's output). Memory: a drained queue keeps one copied buffer of at
// most kKeptBytes for its next use (the first such it holds); a spent piece lets go of its
// buffer, or of its shared buffer's reference, as soon as its bytes are consumed, and spent
// pieces are dropped from the front as they pile up.
//
// A shared piece is kept as its owner and a range of it, and read through the owner each time:
// a lent record's bytes are copied out (SharedBytes::Own) before the record changes, and
// followed (SharedBytes::MovedTo) when it moves, so they are the same bytes but may not be where
// they were. Iovecs from Gather are for a send made at
// once, not for one that reads them later (io_uring's: its queue holds no lent bytes).
//
// Threads: not thread-safe; a shared buffer of its own may be shared across threads (its count
// is atomic), but not written while any queue holds it; a lent one stays on its lender's thread.
#ifndef RINGKV_NET_SEND_QUEUE_H_
#define RINGKV_NET_SEND_QUEUE_H_

#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "base/shared_bytes.h"

namespace ringkv {

class SendQueue {
 public:
  using Shared = std::shared_ptr<const SharedBytes>;
  // Iovecs Gather fills at most (sendmsg takes up to IOV_MAX, 1024).
  static constexpr int kMaxIovecs = 64;
  // A shared range shorter than this is copied when moved (MoveTo): not worth an iovec.
  static constexpr size_t kMinSharedBytes = 2048;
  // The copied buffer a drained queue keeps for its next use, at most.
  static constexpr size_t kKeptBytes = size_t{4} << 20;

  SendQueue() = default;
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Pieces held, spent ones included (what memory the queue's bookkeeping takes).
  size_t pieces() const { return pieces_.size(); }

  // Copies `bytes` to the end.
  void Append(std::string_view bytes) {
    std::string& tail = CopiedTail();
    tail.append(bytes.data(), bytes.size());
    size_ += bytes.size();
  }
  // `bytes` more at the end, for the caller to write at once (what they hold until then is
  // unspecified).
  char* AppendSpace(size_t bytes) {
    std::string& tail = CopiedTail();
    const size_t at = tail.size();
    tail.resize(at + bytes);
    size_ += bytes;
    return tail.data() + at;
  }
  // Shares `bytes`, which lie in `owner`'s bytes, without copying them.
  void Append(Shared owner, std::string_view bytes);
  // Moves the first `bytes` (at most size()) to the end of `to`: copied bytes and short shared
  // ranges are copied, longer shared ranges shared unless `share` is false (a writer that
  // copies anyway, as OpenSSL does, is better off with one contiguous piece).
  void MoveTo(SendQueue& to, size_t bytes, bool share = true);
  // Keeps the first `bytes` (at most size()) and drops the rest.
  void Truncate(size_t bytes);

  // The front, as up to `max` iovecs (kMaxIovecs at most); returns how many. They stay valid
  // until the queue is next changed.
  int Gather(iovec* iov, int max = kMaxIovecs) const;
  // The front piece's bytes (for writes that take one buffer at a time: TLS).
  std::string_view Front() const;
  // Drops the first `bytes` (at most size()): they were sent.
  void Consume(size_t bytes);
  void Clear() { Consume(size_); }
  void swap(SendQueue& other) noexcept {
    pieces_.swap(other.pieces_);
    std::swap(head_, other.head_);
    std::swap(offset_, other.offset_);
    std::swap(size_, other.size_);
  }

 private:
  struct Piece {
    std::string copied;  // The bytes, unless shared.
    Shared owner;        // Shared: the bytes' owner, and their range of its bytes.
    size_t from = 0;
    size_t length = 0;
    std::string_view bytes() const {
      return owner ? std::string_view(owner->data() + from, length) : std::string_view(copied);
    }
  };

  // The last piece if it is copied (its consumed front dropped once large), else a new copied
  // one.
  std::string& CopiedTail() {
    if (!pieces_.empty() && !pieces_.back().owner &&
        (head_ + 1 != pieces_.size() || offset_ < kCompactBytes)) {
      return pieces_.back().copied;
    }
    return NewOrCompactedTail();
  }
  std::string& NewOrCompactedTail();
  // The consumed front a copied tail may hold before it is dropped (NewOrCompactedTail).
  static constexpr size_t kCompactBytes = 64 * 1024;
  // Nothing is left: keeps the buffer of the first copied piece of at most kKeptBytes.
  void Reset();

  // pieces_[head_..] hold the bytes; those before are spent. One inline: a queue of copied
  // bytes alone (most calls' responses) allocates nothing but its buffer.
  absl::InlinedVector<Piece, 1> pieces_;
  size_t head_ = 0;
  size_t offset_ = 0;  // Bytes of pieces_[head_] already consumed.
  size_t size_ = 0;
};

}  // namespace ringkv

#endif  // RINGKV_NET_SEND_QUEUE_H_
