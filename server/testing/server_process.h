// ServerProcess: a real ringkv-server child process on a free loopback port, for tests. The
// binary comes from $RINGKV_SERVER (meson test sets it), or with Binary::kFaults from
// $RINGKV_SERVER_FAULTS: ringkv-server-faults, the same daemon with fault flags
// (server/testing/faults_main.cc). Start() waits for the daemon's
// "listening on" line and reads the port from it; the destructor sends SIGTERM if it still
// runs. Its stderr is kept for failure messages. Test thread only.
//
//   ServerProcess server({"--threads=3"});
//   ASSERT_TRUE(server.Start()) << server.log();
//   ringkv::Client client(server.address(), absl::Seconds(5));
#ifndef RINGKV_SERVER_TESTING_SERVER_PROCESS_H_
#define RINGKV_SERVER_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringkv::testing {

class ServerProcess {
 public:
  enum class Binary { kServer, kFaults };
  explicit ServerProcess(std::vector<std::string> args, Binary binary = Binary::kServer);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the daemon (adds --listen=127.0.0.1:0 unless args name --listen); false if it exits
  // or prints no port within 20 s.
  bool Start();
  // Sends `signal` and waits up to `timeout_s` for the exit; returns the exit status, 128+N if
  // killed by signal N, or -1 on timeout (the process is then killed).
  int Stop(int signal, double timeout_s);
  // Waits for an exit that should come by itself (a failed start); same codes as Stop.
  int Wait(double timeout_s);
  // User+system CPU seconds used so far, from /proc.
  double CpuSeconds() const;
  // Resident memory now (VmRSS) and at its peak (VmHWM), from /proc, in bytes.
  uint64_t RssBytes() const;
  uint64_t PeakRssBytes() const;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const;

 private:
  std::vector<std::string> args_;
  const Binary binary_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_status_ = -1;
  int stderr_fd_ = -1;
  std::thread reader_;  // Appends the daemon's stderr to log_ after start-up.
  mutable std::mutex mu_;
  std::string log_;  // Guarded by mu_.
};

}  // namespace ringkv::testing

#endif  // RINGKV_SERVER_TESTING_SERVER_PROCESS_H_
