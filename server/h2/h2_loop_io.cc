#include "server/h2/h2_loop_io.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "server/h2/connection.h"
#include "server/h2/h2_call.h"
#include "server/server_context.h"
#include "server/shard_loop.h"

namespace ringkv {
namespace {

// epoll tags of the two sockets that are not connections.
char listener_tag;
char wake_tag;

// --io=uring: a completion's tag is a connection's address with the operation in its low bits,
// or the operation alone for the loop's own.
enum : uint64_t {
  kReceiveOp = 1,
  kSendOp = 2,
  kWakeOp = 3,
  kEpollOp = 4,
  kCancelOp = 5,  // Its completion says nothing the receive's own does not.
  kOpMask = 7
};
static_assert(alignof(Connection) > kOpMask);
uint64_t Tag(Connection* connection, uint64_t op) {
  return reinterpret_cast<uint64_t>(connection) | op;
}

// Ready sockets taken per turn. A turn reads them all, runs the engine, then answers them all,
// so a request that arrives just after epoll_wait waits for the whole turn before its own:
// unary GETs over 50 connections had p99 0.95 ms with 64 (about 31 ready per wait, ~300 us a
// turn), 0.51-0.56 ms with 16 or 8, at the same throughput and CPU per call (BENCHMARKS.md).
constexpr int kEventsPerWait = 16;
// Connections accepted per readiness event before the loop's other work gets its turn.
constexpr int kAcceptsPerEvent = 64;
// How long a loop that could not even get its spare descriptor back stops accepting.
constexpr int64_t kAcceptPauseNs = 100'000'000;
// At most one warning about refused connections per loop in this many nanoseconds.
constexpr int64_t kWarningIntervalNs = 10'000'000'000;
// How long a connection must have been idle before a new one may evict it: a client between
// two calls, or one that has just connected and is about to call, is not idle.
constexpr int64_t kMinIdleToEvictNs = 1'000'000'000;
// How long an accepted connection waits for the slot another loop was asked to free.
constexpr int64_t kEvictWaitNs = 100'000'000;
// The sweep's period: a quarter of the shorter of --idle-timeout and --send-timeout (so a
// connection closes within 1.5x of it), at most this. A sweep visits every connection of the
// loop (about 1 ms for 10,000).
constexpr int64_t kMaxSweepEveryNs = 1'000'000'000;

int64_t TimeoutNs(absl::Duration timeout) {
  return std::max<int64_t>(0, absl::ToInt64Nanoseconds(timeout));
}

int64_t SweepEveryNs(int64_t idle_timeout_ns, int64_t send_timeout_ns) {
  int64_t every = kMaxSweepEveryNs;
  for (const int64_t timeout : {idle_timeout_ns, send_timeout_ns}) {
    if (timeout > 0) every = std::min(every, std::max<int64_t>(timeout / 4, 1'000'000));
  }
  return every;
}
// A loop that never parks and gets no events reads the clock for the sweep every so many polls.
constexpr uint32_t kQuietPollsPerClockRead = 1024;

// Evictable connections as a heap whose front is the idlest (the earliest idle-since time).
bool IdlerFirst(const std::pair<int64_t, Connection*>& a,
                const std::pair<int64_t, Connection*>& b) {
  return a.first > b.first;
}

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

uint64_t OpenFilesLimit() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

// The server's preface (an empty SETTINGS frame) and a GOAWAY with ENHANCE_YOUR_CALM whose
// debug data says why: what a refused client gets before the connection closes.
std::string RefusalFrames(std::string_view why) {
  const std::string text = "ringkv-server: " + std::string(why);
  std::string frames;
  auto append = [&frames](uint32_t value, int bytes) {  // Big-endian.
    for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
      frames.push_back(static_cast<char>(value >> shift));
    }
  };
  auto header = [&](uint32_t length, uint8_t type) {
    append(length, 3);
    append(type, 1);
    append(0, 1);  // Flags.
    append(0, 4);  // Stream 0: the connection.
  };
  header(0, NGHTTP2_SETTINGS);
  header(8 + static_cast<uint32_t>(text.size()), NGHTTP2_GOAWAY);
  append(0, 4);  // Last stream id: none was processed.
  append(NGHTTP2_ENHANCE_YOUR_CALM, 4);
  frames.append(text);
  return frames;
}

}  // namespace

H2LoopIo::H2LoopIo(ConnectionGate& gate, ShardLoop& loop, std::unique_ptr<Uring> uring)
    : gate_(gate),
      loop_(loop),
      epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      index_(gate.RegisterLoop(this)),
      idle_timeout_ns_(TimeoutNs(loop.context().options().idle_timeout)),
      send_timeout_ns_(TimeoutNs(loop.context().options().send_timeout)),
      sweep_every_ns_(SweepEveryNs(idle_timeout_ns_, send_timeout_ns_)),
      read_buffer_(new char[kReadBufferBytes]),
      uring_(std::move(uring)),
      spare_fd_(OpenSpare()) {
  ABSL_RAW_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "cannot make the loop's epoll set");
  if (uring_ == nullptr) {  // The ring reads the eventfd itself (Start).
    epoll_event wake{};
    wake.events = EPOLLIN;
    wake.data.ptr = &wake_tag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake);
  }

  nghttp2_session_callbacks_new(&callbacks_);
  nghttp2_session_callbacks_set_send_callback(callbacks_, Connection::OnSend);
  nghttp2_session_callbacks_set_send_data_callback(callbacks_, Connection::OnSendData);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks_, Connection::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks_, Connection::OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks_, Connection::OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks_,
                                                            Connection::OnDataChunkRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks_, Connection::OnStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks_, Connection::OnFrameSend);
  nghttp2_option_new(&option_);
  // Received DATA is acknowledged as the calls take it (H2Call::Consume).
  nghttp2_option_set_no_auto_window_update(option_, 1);
  // No priority tree of closed streams to keep.
  nghttp2_option_set_no_closed_streams(option_, 1);
}

H2LoopIo::~H2LoopIo() {
  uring_.reset();        // Nothing in the kernel refers to a connection's buffers after this.
  dirty_.clear();        // EndTurn below must not flush a connection deleted here ...
  ack_holders_.clear();  // ... nor look at one.
  for (Connection* connection : connections_) delete connection;
  EndTurn();  // Deletes what is retired.
  for (Connection* connection : draining_) delete connection;
  if (waiting_fd_ >= 0) close(waiting_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
  close(wake_fd_);
  close(epoll_fd_);
  nghttp2_option_del(option_);
  nghttp2_session_callbacks_del(callbacks_);
}

void H2LoopIo::Start() {
  if (uring_ != nullptr && !ring_armed_) {
    // The first Start: the ring watches the epoll set and reads the eventfd from now on.
    ring_armed_ = true;
    uring_->PollIn(epoll_fd_, kEpollOp);
    ReadWake();
  }
  epoll_event event{};
  // EPOLLEXCLUSIVE: a new connection wakes one parked loop, not every one.
  event.events = EPOLLIN | EPOLLEXCLUSIVE;
  event.data.ptr = &listener_tag;
  listening_ = epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, gate_.listener().fd(), &event) == 0;
}

size_t H2LoopIo::Poll() {
  size_t work = 0;
  // Under --io=uring what completed comes back first: a stop sends its GOAWAY itself once no
  // send is out, after the last turn's.
  size_t events = uring_ != nullptr ? Reap() : 0;
  if (!stopped_ && gate_.stopping()) {
    StopAll();
    ++work;
  }
  if (!listening_ && accept_resume_ns_ > 0 && NowNs() >= accept_resume_ns_) {
    accept_resume_ns_ = 0;
    Start();
  }
  if (uring_ == nullptr) events = HandleEvents(0);
  work += events;
  work += PumpReady();
  work += ExpireDeadlines();
  work += ExpireGreetings();
  // One clock read per batch of events (none per request), or now and then without any.
  if (events > 0 || ++quiet_polls_ >= kQuietPollsPerClockRead || waiting_fd_ >= 0 ||
      gate_.evictions_asked(index_)) {
    work += TendIdle(TurnNowNs());
  }
  return work;
}

bool H2LoopIo::Wait(std::chrono::nanoseconds timeout) {
  int64_t wait_ns = timeout.count();
  if (!deadlines_.empty() || accept_resume_ns_ > 0 || !greetings_.empty()) {
    const int64_t now = NowNs();
    if (!deadlines_.empty()) wait_ns = std::min(wait_ns, deadlines_.begin()->first - now);
    if (accept_resume_ns_ > 0) wait_ns = std::min(wait_ns, accept_resume_ns_ - now);
    if (!greetings_.empty()) wait_ns = std::min(wait_ns, greetings_.front().first - now);
  }
  // A connection waiting for a slot another loop frees: look again each millisecond.
  if (waiting_fd_ >= 0) wait_ns = std::min<int64_t>(wait_ns, 1'000'000);
  size_t work = 0;
  if (uring_ != nullptr) {
    if (!epoll_ready_) uring_->SubmitAndWait(std::max<int64_t>(0, wait_ns));
    work += Reap();
  } else {
    const int timeout_ms = static_cast<int>(std::max<int64_t>(0, (wait_ns + 999'999) / 1'000'000));
    work += HandleEvents(timeout_ms);
  }
  work += PumpReady();
  work += ExpireDeadlines();
  work += ExpireGreetings();
  work += TendIdle(TurnNowNs());  // A parked loop sweeps from here (it wakes every 100 ms at most).
  return work > 0;
}

void H2LoopIo::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
}

size_t H2LoopIo::HandleEvents(int timeout_ms) {
  epoll_event events[kEventsPerWait];
  const int n = epoll_wait(epoll_fd_, events, kEventsPerWait, timeout_ms);
  turn_now_ns_ = 0;
  for (int i = 0; i < n; ++i) {
    void* tag = events[i].data.ptr;
    if (tag == &wake_tag) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof count);
      loop_.OnWakeEvent();
    } else if (tag == &listener_tag) {
      Accept();
    } else {
      // A connection retired earlier in this batch is still there (deleted at the end of the
      // turn), and closed.
      auto* connection = static_cast<Connection*>(tag);
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) connection->OnReadable();
      if (events[i].events & EPOLLOUT) connection->OnWritable();
    }
  }
  return n > 0 ? static_cast<size_t>(n) : 0;
}

size_t H2LoopIo::Reap() {
  turn_now_ns_ = 0;
  size_t work = uring_->Reap([this](const io_uring_cqe& cqe) { Complete(cqe); });
  if (epoll_ready_) {
    // The ring's poll fires once per wake-up: look until the set has nothing more.
    const size_t events = HandleEvents(0);
    epoll_ready_ = events > 0;
    work += events;
  }
  return work;
}

void H2LoopIo::Complete(const io_uring_cqe& cqe) {
  const uint64_t op = cqe.user_data & kOpMask;
  auto* connection = reinterpret_cast<Connection*>(cqe.user_data & ~uint64_t{kOpMask});
  switch (op) {
    case kReceiveOp: {
      const bool more = (cqe.flags & IORING_CQE_F_MORE) != 0;
      if (cqe.res == -EINVAL && uring_->multishot()) {
        // A kernel before 6.0: one receive at a time from now on.
        uring_->NoMultishot();
        Log(LogLevel::kInfo, "--io=uring: no multishot receives on this kernel; one at a time");
        connection->OnReceived(-EAGAIN, nullptr, more);
        break;
      }
      const bool has_buffer = (cqe.flags & IORING_CQE_F_BUFFER) != 0;
      connection->OnReceived(cqe.res, has_buffer ? uring_->Buffer(cqe.flags) : nullptr, more);
      if (has_buffer) uring_->GiveBack(cqe.flags);
      break;
    }
    case kSendOp:
      connection->OnSent(cqe.res);
      break;
    case kWakeOp:
      loop_.OnWakeEvent();
      if (cqe.res > 0 || cqe.res == -EINTR || cqe.res == -EAGAIN) {
        ReadWake();
      } else if (cqe.res != -ECANCELED) {
        // Never seen; rather than spin on it, the loop wakes by its park timeout from now on.
        Log(LogLevel::kError, "--io=uring: reading the loop's eventfd failed: %s",
            std::strerror(-cqe.res));
      }
      break;
    case kEpollOp:
      epoll_ready_ = true;
      if ((cqe.flags & IORING_CQE_F_MORE) == 0) uring_->PollIn(epoll_fd_, kEpollOp);
      break;
    default:
      break;
  }
}

void H2LoopIo::ReadWake() { uring_->Read(wake_fd_, &wake_count_, sizeof wake_count_, kWakeOp); }

void H2LoopIo::Receive(Connection* connection) {
  uring_->Receive(connection->fd_, Tag(connection, kReceiveOp));
}

void H2LoopIo::CancelReceive(Connection* connection) {
  uring_->Cancel(Tag(connection, kReceiveOp), kCancelOp);
}

void H2LoopIo::Send(Connection* connection, std::string_view bytes) {
  uring_->Send(connection->fd_, bytes, Tag(connection, kSendOp));
}

void H2LoopIo::Send(Connection* connection, const msghdr* message) {
  uring_->Send(connection->fd_, message, Tag(connection, kSendOp));
}

void H2LoopIo::Accept() {
  if (!listening_) return;
  for (int i = 0; i < kAcceptsPerEvent; ++i) {
    const int fd = accept4(gate_.listener().fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      switch (errno) {
        case EAGAIN:
          return;
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
          continue;
        case EMFILE:
        case ENFILE:
        case ENOBUFS:
        case ENOMEM: {
          // Out of descriptors: answer the waiting connection with the spare one.
          const uint64_t limit = OpenFilesLimit();
          if (spare_fd_ >= 0) {
            close(spare_fd_);
            spare_fd_ = -1;
          }
          const int refused =
              accept4(gate_.listener().fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (refused >= 0) {
            gate_.CountRefused(ConnectionGate::kOutOfDescriptors);
            Refuse(refused, absl::StrCat("out of file descriptors (the open-files limit is ", limit,
                                         "); try again when connections have closed"));
          }
          spare_fd_ = OpenSpare();
          if (refused < 0 || spare_fd_ < 0) {
            PauseAccepting();
            return;
          }
          continue;
        }
        case EINVAL:  // The listener was shut down (Transport::Stop).
          epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, gate_.listener().fd(), nullptr);
          listening_ = false;
          return;
        default:
          Log(LogLevel::kWarning, "accept failed: %s", std::strerror(errno));
          PauseAccepting();
          return;
      }
    }
    const int64_t now = NowNs();
    if (gate_.TakeConnectionSlot()) {
      Admit(fd, now);
    } else if (!MakeRoomFor(fd, now)) {
      gate_.CountRefused(ConnectionGate::kTooManyConnections);
      Refuse(fd, TooManyConnections());
    } else if (waiting_fd_ >= 0) {
      return;  // `fd` waits for its slot; this loop accepts no more meanwhile.
    }
  }
}

std::string H2LoopIo::TooManyConnections() const {
  return absl::StrCat("too many connections and none idle; the limit is --max-connections=",
                      loop_.context().options().max_connections);
}

void H2LoopIo::Admit(int fd, int64_t now) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int64_t greet_by =
      now + absl::ToInt64Nanoseconds(loop_.context().options().handshake_timeout);
  auto* connection = new Connection(*this, fd, now, greet_by);
  if (uring_ != nullptr && loop_.context().tls() == nullptr) {
    connections_.insert(connection);
    greetings_.emplace_back(greet_by, connection);
    connection->UseCompletions();
    return;
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.ptr = connection;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    // The kernel's epoll limit (fs.epoll.max_user_watches) or its memory: like running out of
    // descriptors, counted and said as that refusal is (its client sees a close, no GOAWAY).
    gate_.CountRefused(ConnectionGate::kOutOfDescriptors);
    WarnRefusal(absl::StrCat("cannot watch its socket: ", std::strerror(errno),
                             " (fs.epoll.max_user_watches, or the kernel's memory)"));
    connection->Close();
    return;
  }
  connections_.insert(connection);
  greetings_.emplace_back(greet_by, connection);
}

bool H2LoopIo::MakeRoomFor(int fd, int64_t now) {
  Connection* own = IdlestEvictable(now);
  int64_t other_since = 0;
  const int other = gate_.IdlestOtherLoop(index_, &other_since);
  if (own != nullptr && (other < 0 || own->idle_since_ns() <= other_since)) {
    EvictIdlest(now);  // Frees its slot at once.
    if (gate_.TakeConnectionSlot()) {
      Admit(fd, now);
      return true;
    }
    return false;  // Another loop's new connection took the slot first: this one is refused.
  }
  if (other < 0) return false;
  gate_.RequestEviction(static_cast<uint32_t>(other));
  waiting_fd_ = fd;
  waiting_until_ns_ = now + kEvictWaitNs;
  waiting_retried_ = false;
  if (listening_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, gate_.listener().fd(), nullptr);
  listening_ = false;
  return true;
}

void H2LoopIo::ListenAgain() {
  if (!listening_ && !stopped_ && !gate_.stopping() && accept_resume_ns_ == 0 && waiting_fd_ < 0) {
    Start();
  }
}

size_t H2LoopIo::TendIdle(int64_t now) {
  quiet_polls_ = 0;
  size_t work = 0;
  if (gate_.evictions_asked(index_)) {
    // What cannot be evicted any more is not owed: the asking loop refuses after kEvictWait.
    for (uint32_t asked = gate_.TakeEvictionsAsked(index_); asked > 0 && EvictIdlest(now);
         --asked) {
      ++work;
    }
  }
  if (waiting_fd_ >= 0) {
    const int fd = waiting_fd_;
    if (gate_.TakeConnectionSlot()) {
      waiting_fd_ = -1;
      Admit(fd, now);
      ListenAgain();
      ++work;
    } else if (now >= waiting_until_ns_) {
      // The loop asked had nothing left to evict (its connection spoke, or went to another
      // loop's new one; it has published so): look once more, then refuse.
      waiting_fd_ = -1;
      const bool retry = !waiting_retried_;
      if (!retry || !MakeRoomFor(fd, now)) {
        gate_.CountRefused(ConnectionGate::kTooManyConnections);
        Refuse(fd, TooManyConnections());
      } else if (waiting_fd_ >= 0) {
        waiting_retried_ = true;
      }
      ListenAgain();
      ++work;
    }
  }
  if (now >= next_sweep_ns_) {
    next_sweep_ns_ = now + sweep_every_ns_;
    work += Sweep(now);
  }
  return work;
}

size_t H2LoopIo::Sweep(int64_t now) {
  evictable_.clear();
  std::vector<Connection*> expired;
  std::vector<Connection*> stalled;
  for (Connection* connection : connections_) {
    const int64_t idle = connection->SweepIdle(now);
    // Idle (no call open, nothing received) does not mean nothing waits to be sent: the
    // output of closed streams may.
    const int64_t stalled_for = send_timeout_ns_ > 0 ? connection->SweepStalled(now) : 0;
    // A connection without its preface is the handshake timeout's, which says why better (a TLS
    // handshake keeps the session's SETTINGS in the output, unsent).
    if (idle_timeout_ns_ > 0 && idle >= idle_timeout_ns_ && connection->greeted()) {
      expired.push_back(connection);
    } else if (send_timeout_ns_ > 0 && stalled_for >= send_timeout_ns_ && connection->greeted()) {
      stalled.push_back(connection);
    } else if (idle >= kMinIdleToEvictNs) {
      evictable_.emplace_back(connection->idle_since_ns(), connection);
    }
  }
  std::make_heap(evictable_.begin(), evictable_.end(), IdlerFirst);
  const ServerOptions& options = loop_.context().options();
  CloseSwept(expired, ConnectionGate::kIdleTimeout,
             absl::StrCat("idle for longer than --idle-timeout=",
                          absl::FormatDuration(options.idle_timeout)));
  CloseSwept(
      stalled, ConnectionGate::kSendTimeout,
      absl::StrCat("answers unread for longer than --send-timeout=",
                   absl::FormatDuration(options.send_timeout), ": the client took none of them"));
  PublishIdlest(now);
  return expired.size() + stalled.size();
}

void H2LoopIo::CloseSwept(std::span<Connection* const> connections,
                          ConnectionGate::CloseReason reason, std::string_view why) {
  if (connections.empty()) return;
  Log(LogLevel::kDebug, "closing %d connection%s: %s", connections.size(),
      connections.size() == 1 ? "" : "s", why);
  for (Connection* connection : connections) {
    gate_.CountClosed(reason);
    // GOAWAY (NO_ERROR; debug data `why`), one try at sending it, then close. The calls left
    // end UNAVAILABLE.
    connection->Terminate(why);
  }
}

Connection* H2LoopIo::IdlestEvictable(int64_t now) {
  while (!evictable_.empty()) {
    const auto [since, connection] = evictable_.front();
    // Checked in this order: an entry's connection may be gone (and its address reused).
    if (connections_.contains(connection) && connection->idle() &&
        connection->idle_since_ns() == since && now - since >= kMinIdleToEvictNs) {
      return connection;
    }
    std::pop_heap(evictable_.begin(), evictable_.end(), IdlerFirst);
    evictable_.pop_back();
  }
  return nullptr;
}

bool H2LoopIo::EvictIdlest(int64_t now) {
  Connection* idlest = IdlestEvictable(now);
  if (idlest != nullptr) {
    std::pop_heap(evictable_.begin(), evictable_.end(), IdlerFirst);
    evictable_.pop_back();
    gate_.CountClosed(ConnectionGate::kIdleEvicted);
    const std::string why = absl::StrCat(
        "closed to make room for a new connection: idle for ",
        absl::FormatDuration(absl::Milliseconds((now - idlest->idle_since_ns()) / 1'000'000)),
        " while --max-connections=", loop_.context().options().max_connections, " were open");
    Log(LogLevel::kDebug, "%s", why);
    idlest->Terminate(why);
  }
  PublishIdlest(now);
  return idlest != nullptr;
}

void H2LoopIo::PublishIdlest(int64_t now) {
  const Connection* idlest = IdlestEvictable(now);
  gate_.PublishIdlest(index_,
                      idlest != nullptr ? idlest->idle_since_ns() : ConnectionGate::kNoIdle);
}

void H2LoopIo::Refuse(int fd, std::string_view why) {
  // What the client already sent is read first, so that the close is a FIN after our frames
  // rather than a reset that could overtake them.
  char discard[1024];
  [[maybe_unused]] ssize_t r = recv(fd, discard, sizeof discard, MSG_DONTWAIT);
  if (loop_.context().tls() == nullptr) {  // Under TLS no frame can go before a handshake.
    const std::string frames = RefusalFrames(why);
    [[maybe_unused]] ssize_t w =
        send(fd, frames.data(), frames.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  shutdown(fd, SHUT_WR);
  close(fd);
  WarnRefusal(why);
}

void H2LoopIo::WarnRefusal(std::string_view why) {
  const int64_t now = NowNs();
  if (now - last_fd_warning_ns_ >= kWarningIntervalNs || last_fd_warning_ns_ == 0) {
    last_fd_warning_ns_ = now;
    Log(LogLevel::kWarning, "refusing new connections: %s", std::string(why));
  } else {
    Log(LogLevel::kDebug, "refused a connection: %s", std::string(why));
  }
}

void H2LoopIo::PauseAccepting() {
  if (listening_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, gate_.listener().fd(), nullptr);
  listening_ = false;
  accept_resume_ns_ = NowNs() + kAcceptPauseNs;
}

void H2LoopIo::Watch(Connection* connection, uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.ptr = connection;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, connection->fd_, &event);
}

void H2LoopIo::MarkDirty(Connection* connection) { dirty_.push_back(connection); }

void H2LoopIo::MakeReady(H2Call* call) {
  if (call->queued || call->retired) return;
  call->queued = true;
  ready_.push_back(call);
}

size_t H2LoopIo::PumpReady() {
  if (ready_.empty()) return 0;
  // Calls made ready while these are pumped wait for the next turn: no unbounded loop here.
  std::vector<H2Call*> ready;
  ready.swap(ready_);
  for (H2Call* call : ready) {
    call->queued = false;
    if (!call->retired) call->Pump();
  }
  return ready.size();
}

size_t H2LoopIo::ExpireDeadlines() {
  if (deadlines_.empty()) return 0;
  const int64_t now = NowNs();
  size_t expired = 0;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    H2Call* call = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    call->OnDeadline();
    ++expired;
  }
  return expired;
}

size_t H2LoopIo::ExpireGreetings() {
  if (greetings_.empty()) return 0;
  const int64_t now = NowNs();
  size_t expired = 0;
  while (!greetings_.empty() && greetings_.front().first <= now) {
    Connection* connection = greetings_.front().second;
    greetings_.pop_front();
    if (!connections_.contains(connection) || connection->greeted() ||
        connection->greet_by_ns() > now) {
      continue;
    }
    gate_.CountRefused(ConnectionGate::kHandshakeTimeout);
    const absl::Duration timeout = loop_.context().options().handshake_timeout;
    Log(LogLevel::kDebug, "closing a connection that sent no HTTP/2 preface within %s",
        absl::FormatDuration(timeout));
    connection->Terminate(absl::StrCat("no HTTP/2 connection preface within --handshake-timeout=",
                                       absl::FormatDuration(timeout)));
    ++expired;
  }
  return expired;
}

void H2LoopIo::Retire(H2Call* call) {
  call->retired = true;
  retired_calls_.push_back(call);
}

void H2LoopIo::Retire(Connection* connection) {
  connections_.erase(connection);
  if (connection->dirty_) std::erase(dirty_, connection);
  retired_connections_.push_back(connection);
}

void H2LoopIo::EndTurn() {
  // A flush can make another connection dirty only through a call's handler, which runs
  // outside flushes; a few rounds settle everything.
  for (int round = 0; round < 4 && !dirty_.empty(); ++round) {
    std::vector<Connection*> dirty;
    dirty.swap(dirty_);
    for (Connection* connection : dirty) connection->Flush();
  }
  if (!ack_holders_.empty()) {
    std::erase_if(ack_holders_, [](Connection* connection) {
      if (connection->HoldsAck()) return false;
      connection->ack_listed = false;
      return true;
    });
  }
  if (!retired_calls_.empty()) {
    std::erase_if(ready_, [](H2Call* call) { return call->retired; });
    for (H2Call* call : retired_calls_) delete call;
    retired_calls_.clear();
  }
  for (Connection* connection : retired_connections_) {
    if (connection->ops() > 0) {
      draining_.push_back(connection);
    } else {
      delete connection;
    }
  }
  retired_connections_.clear();
  if (uring_ != nullptr) {
    std::erase_if(draining_, [](Connection* connection) {
      if (connection->ops() > 0) return false;
      delete connection;
      return true;
    });
    uring_->Submit();  // The turn's sends, and the receives queued since the last entry.
  }
}

void H2LoopIo::DropAcks() {
  size_t dropped = 0;
  for (Connection* connection : ack_holders_) {
    if (!connection->HoldsAck()) continue;
    connection->Close();
    ++dropped;
  }
  if (dropped > 0) {
    Log(LogLevel::kWarning,
        "closed %zu connection(s) holding answers that acknowledge writes, not yet sent when "
        "this server's fence closed: their clients cannot tell whether those writes stay",
        dropped);
  }
}

void H2LoopIo::OnDraining() {
  for (Connection* connection : connections_) connection->SendShutdownNotice();
}

void H2LoopIo::StopAll() {
  stopped_ = true;
  if (listening_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, gate_.listener().fd(), nullptr);
  listening_ = false;
  accept_resume_ns_ = 0;
  if (waiting_fd_ >= 0) {
    close(waiting_fd_);
    waiting_fd_ = -1;
  }
  evictable_.clear();
  gate_.PublishIdlest(index_, ConnectionGate::kNoIdle);
  for (Connection* connection :
       std::vector<Connection*>(connections_.begin(), connections_.end())) {
    connection->Terminate();
  }
}

bool H2LoopIo::Finished() const {
  return stopped_ && connections_.empty() && draining_.empty() && live_calls_ == 0;
}

}  // namespace ringkv
