// Uring: one loop's io_uring (--io=uring; liburing), for the h2 transport's sockets: receives
// and sends are submitted to it and come back as completions, so that a turn that reads and
// answers many connections enters the kernel once to send everything and collect what came,
// instead of an epoll_wait, a recv per ready socket and a send per answered one.
//
// Receives take their buffer from a ring of provided buffers (kBuffers of kBufferBytes): the
// kernel picks one as bytes arrive, so a connection waiting for its client holds none; the loop
// hands each back once nghttp2 has taken its bytes.
//
// Completions: `user_data` is the loop's tag. The ring is made with COOP_TASKRUN and
// TASKRUN_FLAG: the kernel posts completions when the loop enters it, and flags when some wait,
// so that looking for them costs no system call while there are none.
//
// Threads: the loop's thread only (made on the control thread, before the loop runs).
#ifndef RINGKV_SERVER_H2_URING_H_
#define RINGKV_SERVER_H2_URING_H_

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ringkv {

class Uring {
 public:
  static constexpr unsigned kEntries = 1024;  // Submission queue; the completion queue is 2x.
  static constexpr unsigned kBuffers = 128;   // Provided receive buffers (a power of two).
  static constexpr unsigned kBufferBytes = 32 * 1024;

  // A ring with its buffers, or why there is none: io_uring missing (ENOSYS), turned off
  // (kernel.io_uring_disabled, a seccomp profile: EPERM), or a kernel older than the features
  // used here (provided buffer rings: Linux 5.19).
  static absl::StatusOr<std::unique_ptr<Uring>> Make();
  ~Uring();
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;

  // Queue one operation (submitted with the next Submit or SubmitAndWait).
  // Receives into provided buffers: multishot (a completion per arrival, IORING_CQE_F_MORE on
  // all but the last, from Linux 6.0), or one at a time once multishot was refused.
  void Receive(int fd, uint64_t tag);
  void Cancel(uint64_t tag_of_op, uint64_t tag);
  bool multishot() const { return multishot_; }
  void NoMultishot() { multishot_ = false; }
  void Send(int fd, std::string_view bytes, uint64_t tag);
  // A sendmsg: `message` and its iovecs stay put until it completes.
  void Send(int fd, const msghdr* message, uint64_t tag);
  void Read(int fd, void* into, size_t bytes, uint64_t tag);
  void PollIn(int fd, uint64_t tag);  // Multishot: a completion per wake-up.

  // The bytes of a receive's completion (its flags name the buffer), and giving it back.
  const char* Buffer(uint32_t cqe_flags) const;
  void GiveBack(uint32_t cqe_flags);

  // Submits what is queued, if anything (operations the kernel could not take yet first).
  void Submit();
  // Submits what is queued and waits up to `timeout_ns` for a completion.
  void SubmitAndWait(int64_t timeout_ns);
  // Calls `take(cqe)` for each completion there is; returns how many.
  template <typename Take>
  size_t Reap(Take take) {
    size_t taken = 0;
    io_uring_cqe* cqes[64];
    for (;;) {
      const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, std::size(cqes));
      for (unsigned i = 0; i < n; ++i) take(*cqes[i]);
      io_uring_cq_advance(&ring_, n);
      taken += n;
      if (n < std::size(cqes)) return taken;
    }
  }

 private:
  Uring() = default;
  // The next entry to fill: in the submission queue, or, while the kernel takes no more,
  // deferred_'s.
  io_uring_sqe* Sqe();
  // Moves deferred_ into the submission queue, in order, as far as there is room.
  void PushDeferred();

  io_uring ring_{};
  bool ring_made_ = false;
  io_uring_buf_ring* buffer_ring_ = nullptr;  // Shared with the kernel.
  size_t buffer_ring_bytes_ = 0;
  char* buffers_ = nullptr;  // kBuffers x kBufferBytes.
  bool multishot_ = true;
  // Operations queued while the submission queue was full and the kernel refused to take it
  // (EBUSY, on kernels that refuse submissions while completions overflow the completion
  // queue): they wait here, in order, until the loop has reaped, and every later operation
  // waits behind them.
  std::deque<io_uring_sqe> deferred_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_H2_URING_H_
