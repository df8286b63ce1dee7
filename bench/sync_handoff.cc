// sync-handoff: what making a log write durable costs the thread that waits for it, by three
// routes (issue 25's "the log on the same ring"):
//   inline  the waiting thread writes and fdatasyncs itself (Redis's appendfsync always);
//   thread  it hands the write to a syncer thread (a mutex and condition variable), which writes
//           and fdatasyncs and then makes an eventfd readable; the waiting thread sleeps in
//           epoll_wait on that eventfd (ringkv's --fsync=always today, persist/log_writer.h);
//   uring   it submits a write and an fdatasync linked on an io_uring of its own, with an eventfd
//           registered on the ring, and sleeps in epoll_wait on that eventfd (the design
//           for an epoll loop: the kernel runs the fdatasync on a worker of its own);
//   uring-wait  the same, waiting in io_uring_enter for both completions (a --io=uring loop's
//           wait);
//   uring-sync  the write inline (pwrite, into the page cache), only the fdatasync on the ring,
//           waited for in io_uring_enter.
// Each round writes BYTES at the next offset of a file whose zeros were written and synced
// first (as the log's zeros ahead), then waits until that write is durable. The variants take
// turns, a block of 100 rounds each, so that they share the disk's moods. Per variant: the
// median, p10 and p90 of a round's wall time, and the process's CPU per round (user + system,
// every thread's, the io_uring workers' included: getrusage) and context switches per round.
//
// Usage: sync-handoff [ROUNDS=3000] [BYTES=600] [DIR=.]   (the file is made in DIR, removed)
#include <fcntl.h>
#include <liburing.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kZeroed = uint64_t{32} << 20;
constexpr int kBlock = 100;

[[noreturn]] void Die(const char* what) {
  std::perror(what);
  std::exit(1);
}

struct Usage {
  double cpu_us = 0;
  long switches = 0;
};

Usage Now() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  auto us = [](const timeval& t) { return t.tv_sec * 1e6 + t.tv_usec; };
  return {us(r.ru_utime) + us(r.ru_stime), r.ru_nvcsw + r.ru_nivcsw};
}

// Waits on `event_fd` through an epoll set, as a worker's loop does, and empties it.
class Waiter {
 public:
  explicit Waiter(int event_fd) : event_fd_(event_fd), epoll_fd_(epoll_create1(EPOLL_CLOEXEC)) {
    epoll_event e{};
    e.events = EPOLLIN;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &e) != 0) Die("epoll_ctl");
  }
  ~Waiter() { close(epoll_fd_); }
  void Wait() {
    epoll_event e;
    while (epoll_wait(epoll_fd_, &e, 1, -1) != 1) {
    }
    uint64_t count;
    if (read(event_fd_, &count, sizeof count) != sizeof count) Die("read eventfd");
  }

 private:
  int event_fd_;
  int epoll_fd_;
};

class Syncer {
 public:
  Syncer(int fd, int event_fd) : fd_(fd), event_fd_(event_fd), thread_([this] { Run(); }) {}
  ~Syncer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void Hand(const char* bytes, size_t size, uint64_t offset) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bytes_ = bytes;
      size_ = size;
      offset_ = offset;
      ready_ = true;
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return ready_ || stop_; });
      if (stop_) return;
      ready_ = false;
      lock.unlock();
      if (pwrite(fd_, bytes_, size_, static_cast<off_t>(offset_)) != static_cast<ssize_t>(size_)) {
        Die("pwrite");
      }
      if (fdatasync(fd_) != 0) Die("fdatasync");
      const uint64_t one = 1;
      if (write(event_fd_, &one, sizeof one) != sizeof one) Die("write eventfd");
      lock.lock();
    }
  }

  const int fd_;
  const int event_fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  const char* bytes_ = nullptr;
  size_t size_ = 0;
  uint64_t offset_ = 0;
  bool ready_ = false;
  bool stop_ = false;
  std::thread thread_;
};

struct Result {
  std::vector<double> wall_us;
  double cpu_us = 0;
  long switches = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3000;
  const size_t bytes = argc > 2 ? static_cast<size_t>(std::atol(argv[2])) : 600;
  const std::string dir = argc > 3 ? argv[3] : ".";
  if (rounds <= 0 || bytes == 0 || bytes > (1 << 20)) {
    std::fprintf(stderr, "usage: sync-handoff [ROUNDS=3000] [BYTES=600 (1 .. 1 MiB)] [DIR=.]\n");
    return 2;
  }
  const std::string path = dir + "/sync-handoff.tmp";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Die(path.c_str());
  {
    const std::string zeros(1 << 20, '\0');
    for (uint64_t at = 0; at < kZeroed; at += zeros.size()) {
      if (pwrite(fd, zeros.data(), zeros.size(), static_cast<off_t>(at)) !=
          static_cast<ssize_t>(zeros.size())) {
        Die("pwrite zeros");
      }
    }
    if (fsync(fd) != 0) Die("fsync");
  }
  const std::string record(bytes, 'r');
  uint64_t offset = 0;
  auto next_offset = [&] {
    const uint64_t at = offset;
    offset = offset + bytes > kZeroed ? 0 : offset + bytes;
    return at;
  };

  const int thread_event = eventfd(0, EFD_CLOEXEC);
  const int ring_event = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (thread_event < 0 || ring_event < 0) Die("eventfd");
  Syncer syncer(fd, thread_event);
  Waiter thread_waiter(thread_event);
  io_uring ring;
  if (int e = io_uring_queue_init(8, &ring, 0); e < 0) {
    errno = -e;
    Die("io_uring_queue_init");
  }
  if (int e = io_uring_register_eventfd(&ring, ring_event); e < 0) {
    errno = -e;
    Die("io_uring_register_eventfd");
  }
  Waiter ring_waiter(ring_event);

  enum Route { kInline, kThread, kUring, kUringWait, kUringSync, kRoutes };
  const char* names[kRoutes] = {"inline", "thread", "uring", "uring-wait", "uring-sync"};
  Result results[kRoutes];
  auto write_inline = [&](uint64_t at) {
    if (pwrite(fd, record.data(), bytes, static_cast<off_t>(at)) != static_cast<ssize_t>(bytes)) {
      Die("pwrite");
    }
  };
  for (int done = 0; done < rounds; done += kBlock) {
    for (int v = 0; v < kRoutes; ++v) {
      const Usage before = Now();
      for (int i = 0; i < kBlock; ++i) {
        const uint64_t at = next_offset();
        const auto t0 = std::chrono::steady_clock::now();
        if (v == kInline) {
          write_inline(at);
          if (fdatasync(fd) != 0) Die("fdatasync");
        } else if (v == kThread) {
          syncer.Hand(record.data(), bytes, at);
          thread_waiter.Wait();
        } else {
          int ops = 2;
          if (v == kUringSync) {
            write_inline(at);
            ops = 1;
          } else {
            io_uring_sqe* w = io_uring_get_sqe(&ring);
            io_uring_prep_write(w, fd, record.data(), static_cast<unsigned>(bytes), at);
            w->flags |= IOSQE_IO_LINK;
          }
          io_uring_sqe* s = io_uring_get_sqe(&ring);
          io_uring_prep_fsync(s, fd, IORING_FSYNC_DATASYNC);
          if (v == kUring) {
            if (io_uring_submit(&ring) != ops) Die("io_uring_submit");
          } else if (io_uring_submit_and_wait(&ring, static_cast<unsigned>(ops)) != ops) {
            Die("io_uring_submit_and_wait");
          }
          for (int reaped = 0; reaped < ops;) {
            if (v == kUring) ring_waiter.Wait();
            io_uring_cqe* cqe;
            while (io_uring_peek_cqe(&ring, &cqe) == 0) {
              if (cqe->res < 0) {
                errno = -cqe->res;
                Die("io_uring write or fsync");
              }
              io_uring_cqe_seen(&ring, cqe);
              ++reaped;
            }
            if (v != kUring && reaped < ops) {
              if (io_uring_wait_cqe(&ring, &cqe) != 0) Die("io_uring_wait_cqe");
            }
          }
          // The eventfd stays registered: empty it for the epoll route's next round.
          if (v != kUring) {
            uint64_t count;
            [[maybe_unused]] ssize_t r = read(ring_event, &count, sizeof count);
          }
        }
        results[v].wall_us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      const Usage after = Now();
      results[v].cpu_us += after.cpu_us - before.cpu_us;
      results[v].switches += after.switches - before.switches;
    }
  }
  io_uring_queue_exit(&ring);
  close(fd);
  unlink(path.c_str());

  std::printf(
      "| route | wall us per durable write: median | p10 | p90 | CPU us per write | "
      "context switches per write |\n|---|---|---|---|---|---|\n");
  for (int v = 0; v < kRoutes; ++v) {
    std::vector<double>& w = results[v].wall_us;
    std::sort(w.begin(), w.end());
    auto at = [&](double q) { return w[static_cast<size_t>(q * (w.size() - 1))]; };
    const double n = static_cast<double>(w.size());
    std::printf("| %s | %.0f | %.0f | %.0f | %.1f | %.2f |\n", names[v], at(0.5), at(0.1), at(0.9),
                results[v].cpu_us / n, static_cast<double>(results[v].switches) / n);
  }
  return 0;
}
