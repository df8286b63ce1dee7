// ByteBuffer: a growable array of bytes whose spare capacity can be written in place, then
// taken into its size (Commit), without the zero-fill std::string::resize would do first. A call
// reads a large request message straight from its socket into it (server/h2/h2_call.h); the
// client's channel serializes a request straight into its frames (net/h2_channel.h).
//
//   ByteBuffer b;
//   b.reserve(n);                                       // Room for n bytes, none written.
//   ssize_t got = recv(fd, b.spare(), b.capacity() - b.size(), 0);
//   if (got > 0) b.Commit(got);                         // They are the buffer's now.
//
// Threads: none of its own; one thread at a time.
#ifndef RINGKV_NET_BYTE_BUFFER_H_
#define RINGKV_NET_BYTE_BUFFER_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>

namespace ringkv {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;

  const char* data() const { return bytes_.get(); }
  char* data() { return bytes_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  // Where the next byte goes: capacity() - size() may be written there, then Commit'ed.
  char* spare() { return bytes_.get() + size_; }

  // Room for `n` bytes in all; what is in stays.
  void reserve(size_t n) {
    if (n <= capacity_) return;
    std::unique_ptr<char[]> grown = std::make_unique_for_overwrite<char[]>(n);
    if (size_ > 0) std::memcpy(grown.get(), bytes_.get(), size_);
    bytes_ = std::move(grown);
    capacity_ = n;
  }
  // Room for `n` more bytes (the capacity at least doubling as it grows): spare(), returned,
  // may take n bytes, then Commit(n).
  char* Room(size_t n) {
    if (n > capacity_ - size_) reserve(std::max(size_ + n, 2 * capacity_));
    return spare();
  }
  void append(const char* p, size_t n) {
    std::memcpy(Room(n), p, n);
    size_ += n;
  }
  void append(std::string_view bytes) { append(bytes.data(), bytes.size()); }
  void clear() { size_ = 0; }  // The capacity stays.
  // The first `n` bytes of spare() were written: they are in the buffer now.
  void Commit(size_t n) { size_ += std::min(n, capacity_ - size_); }
  // Drops the first `n` bytes (at most size()).
  void EraseFront(size_t n) {
    n = std::min(n, size_);
    if (n < size_) std::memmove(bytes_.get(), bytes_.get() + n, size_ - n);
    size_ -= n;
  }

 private:
  std::unique_ptr<char[]> bytes_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace ringkv

#endif  // RINGKV_NET_BYTE_BUFFER_H_
