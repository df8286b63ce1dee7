#include "server/h2/uring.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

constexpr uint16_t kBufferGroup = 0;

absl::Status Refused(const char* what, int error) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Uring>> Uring::Make() {
  std::unique_ptr<Uring> uring(new Uring());
  // Multishot receives came in Linux 6.0 (with provided buffer rings: 5.19).
  utsname name{};
  int major = 0;
  uring->multishot_ =
      uname(&name) == 0 && std::sscanf(name.release, "%d", &major) == 1 && major >= 6;
  io_uring_params params{};
  // Room for every connection's receive and send to complete between two reaps.
  params.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_CQSIZE;
  params.cq_entries = 8 * kEntries;
  int rc = io_uring_queue_init_params(kEntries, &uring->ring_, &params);
  if (rc == -EINVAL) {  // Before Linux 5.19: without the task-run flags.
    params = {};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = 8 * kEntries;
    rc = io_uring_queue_init_params(kEntries, &uring->ring_, &params);
  }
  if (rc < 0) return Refused("io_uring_setup", -rc);
  uring->ring_made_ = true;

  uring->buffer_ring_bytes_ = kBuffers * sizeof(io_uring_buf);
  void* ring = mmap(nullptr, uring->buffer_ring_bytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring == MAP_FAILED) return Refused("mmap of the provided buffer ring", errno);
  uring->buffer_ring_ = static_cast<io_uring_buf_ring*>(ring);
  void* buffers = mmap(nullptr, size_t{kBuffers} * kBufferBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffers == MAP_FAILED) return Refused("mmap of the receive buffers", errno);
  uring->buffers_ = static_cast<char*>(buffers);
  io_uring_buf_ring_init(uring->buffer_ring_);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(uring->buffer_ring_);
  reg.ring_entries = kBuffers;
  reg.bgid = kBufferGroup;
  rc = io_uring_register_buf_ring(&uring->ring_, &reg, 0);
  if (rc < 0) return Refused("registering a provided buffer ring (Linux 5.19 or later)", -rc);
  for (unsigned id = 0; id < kBuffers; ++id) {
    io_uring_buf_ring_add(uring->buffer_ring_, uring->buffers_ + size_t{id} * kBufferBytes,
                          kBufferBytes, static_cast<uint16_t>(id), io_uring_buf_ring_mask(kBuffers),
                          static_cast<int>(id));
  }
  io_uring_buf_ring_advance(uring->buffer_ring_, kBuffers);
  return uring;
}

Uring::~Uring() {
  // The ring goes first: nothing of the kernel's refers to the buffers after it.
  if (ring_made_) io_uring_queue_exit(&ring_);
  if (buffers_ != nullptr) munmap(buffers_, size_t{kBuffers} * kBufferBytes);
  if (buffer_ring_ != nullptr) munmap(buffer_ring_, buffer_ring_bytes_);
}

io_uring_sqe* Uring::Sqe() {
  if (deferred_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // The submission queue is full: hand it over, and go on.
      // Completions past the completion queue's room wait in the kernel's overflow list
      // (IORING_FEAT_NODROP), reaped at the next Poll; a kernel that refuses submissions
      // meanwhile (EBUSY) leaves the queue full.
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    if (sqe != nullptr) return sqe;
  }
  return &deferred_.emplace_back(io_uring_sqe{});
}

void Uring::PushDeferred() {
  while (!deferred_.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return;  // Still refused: after the next reap.
    }
    *sqe = deferred_.front();
    deferred_.pop_front();
  }
}

void Uring::Receive(int fd, uint64_t tag) {
  io_uring_sqe* sqe = Sqe();
  // A multishot receive takes its length from the buffers.
  io_uring_prep_recv(sqe, fd, nullptr, multishot_ ? 0 : kBufferBytes, 0);
  if (multishot_) sqe->ioprio |= IORING_RECV_MULTISHOT;
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kBufferGroup;
  io_uring_sqe_set_data64(sqe, tag);
}

void Uring::Cancel(uint64_t tag_of_op, uint64_t tag) {
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_cancel64(sqe, tag_of_op, 0);
  io_uring_sqe_set_data64(sqe, tag);
}

void Uring::Send(int fd, std::string_view bytes, uint64_t tag) {
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_send(sqe, fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, tag);
}

void Uring::Send(int fd, const msghdr* message, uint64_t tag) {
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_sendmsg(sqe, fd, message, MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, tag);
}

void Uring::Read(int fd, void* into, size_t bytes, uint64_t tag) {
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_read(sqe, fd, into, static_cast<unsigned>(bytes), 0);
  io_uring_sqe_set_data64(sqe, tag);
}

void Uring::PollIn(int fd, uint64_t tag) {
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_poll_multishot(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, tag);
}

const char* Uring::Buffer(uint32_t cqe_flags) const {
  return buffers_ + size_t{cqe_flags >> IORING_CQE_BUFFER_SHIFT} * kBufferBytes;
}

void Uring::GiveBack(uint32_t cqe_flags) {
  const auto id = static_cast<uint16_t>(cqe_flags >> IORING_CQE_BUFFER_SHIFT);
  io_uring_buf_ring_add(buffer_ring_, buffers_ + size_t{id} * kBufferBytes, kBufferBytes, id,
                        io_uring_buf_ring_mask(kBuffers), 0);
  io_uring_buf_ring_advance(buffer_ring_, 1);
}

void Uring::Submit() {
  if (!deferred_.empty()) PushDeferred();
  if (io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
}

void Uring::SubmitAndWait(int64_t timeout_ns) {
  if (!deferred_.empty()) PushDeferred();
  __kernel_timespec ts{.tv_sec = timeout_ns / 1'000'000'000, .tv_nsec = timeout_ns % 1'000'000'000};
  io_uring_cqe* cqe = nullptr;
  io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
}

}  // namespace ringkv
