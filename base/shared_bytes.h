// SharedBytes: bytes that several holders share without copying them, as a send queue shares a
// large GET value until the socket has taken it (net/send_queue.h). Either a buffer of their
// own (SharedBytes(std::string)), or bytes lent by their owner where they lie (a shard's
// record, shard/internal/table.h's Table::Loan), which the owner copies into a buffer of the
// object's own (Own) before it changes or frees them, or points to where it moved them. So a holder
// reads data() each time it uses the bytes, and keeps no pointer into them past a point where their
// owner may run: the bytes are the same, but they may have moved.
//
//   auto shared = std::make_shared<const SharedBytes>(std::move(value));
//   queue.Append(shared, shared->view());
//
// Threads: a lent one is the lender's, on the lender's thread only (its holders' last reference
// returns it there), or once that thread has stopped; one with a buffer of its own is never
// written, and may be read anywhere.
#ifndef RINGKV_BASE_SHARED_BYTES_H_
#define RINGKV_BASE_SHARED_BYTES_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace ringkv {

class SharedBytes {
 public:
  explicit SharedBytes(std::string bytes)
      : own_(std::move(bytes)), data_(own_.data()), size_(own_.size()) {}
  SharedBytes(const SharedBytes&) = delete;
  SharedBytes& operator=(const SharedBytes&) = delete;
  ~SharedBytes() = default;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  // Whether the bytes are still where their lender keeps them (false once Own has copied them).
  bool lent() const { return data_ != own_.data(); }

 protected:
  // Lent: `bytes` stay as they are, where they are, until the lender calls Own.
  explicit SharedBytes(std::string_view bytes) : data_(bytes.data()), size_(bytes.size()) {}
  // The lent bytes are now at `data` (the lender moved them, unchanged).
  void MovedTo(const char* data) { data_ = data; }
  // Copies lent bytes into a buffer of the object's own, from which they are read from then on.
  void Own() {
    own_.assign(data_, size_);
    data_ = own_.data();
  }

 private:
  std::string own_;
  const char* data_;
  size_t size_;
};

}  // namespace ringkv

#endif  // RINGKV_BASE_SHARED_BYTES_H_
