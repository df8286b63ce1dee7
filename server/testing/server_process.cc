#include "server/testing/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

extern char** environ;

namespace ringkv::testing {
namespace {

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

ServerProcess::ServerProcess(std::vector<std::string> args, Binary binary)
    : args_(std::move(args)), binary_(binary) {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && exit_status_ < 0) Stop(SIGTERM, 10);
  if (reader_.joinable()) reader_.join();
  if (stderr_fd_ >= 0) close(stderr_fd_);
}

bool ServerProcess::Start() {
  const char* variable = binary_ == Binary::kFaults ? "RINGKV_SERVER_FAULTS" : "RINGKV_SERVER";
  const char* binary = std::getenv(variable);
  if (binary == nullptr) {
    log_ = std::string(variable) + " is not set (meson test sets it)";
    return false;
  }
  std::vector<std::string> argv_strings = {binary};
  bool has_listen = false;
  for (const std::string& a : args_) has_listen |= a.rfind("--listen", 0) == 0;
  if (!has_listen) argv_strings.push_back("--listen=127.0.0.1:0");
  argv_strings.insert(argv_strings.end(), args_.begin(), args_.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  const int rc = posix_spawn(&pid_, binary, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  stderr_fd_ = fds[0];
  if (rc != 0) {
    pid_ = -1;
    log_ = "cannot start " + std::string(binary);
    return false;
  }

  // Read stderr until the "listening on HOST:PORT" line, or EOF, or 20 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string seen;
  while (port_ == 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd p{stderr_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stderr_fd_, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<size_t>(n));
    const size_t at = seen.find("listening on ");
    if (at == std::string::npos) continue;
    const size_t eol = seen.find('\n', at);
    if (eol == std::string::npos) continue;
    const std::string line = seen.substr(at, eol - at);
    const size_t colon = line.rfind(':', line.find(' ', 13));
    port_ = std::atoi(line.c_str() + colon + 1);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_ = seen;
  }
  reader_ = std::thread([this] {
    char buf[4096];
    ssize_t n;
    while ((n = read(stderr_fd_, buf, sizeof buf)) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      log_.append(buf, static_cast<size_t>(n));
    }
  });
  return port_ > 0;
}

int ServerProcess::Wait(double timeout_s) {
  if (exit_status_ >= 0) return exit_status_;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = DecodeStatus(status);
      return exit_status_;
    }
    usleep(10'000);
  }
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  exit_status_ = DecodeStatus(status);
  return -1;
}

int ServerProcess::Stop(int signal, double timeout_s) {
  if (exit_status_ >= 0) return exit_status_;
  kill(pid_, signal);
  return Wait(timeout_s);
}

double ServerProcess::CpuSeconds() const {
  std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
  std::string line;
  std::getline(stat, line);
  // Fields after the command name (which is in parentheses and may hold spaces).
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime.
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

namespace {
// A "Name:   123 kB" line of /proc/PID/status, in bytes; 0 if absent.
uint64_t StatusKb(pid_t pid, const std::string& name) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(name + ":", 0) == 0) return std::stoull(line.substr(name.size() + 1)) * 1024;
  }
  return 0;
}
}  // namespace

uint64_t ServerProcess::RssBytes() const { return StatusKb(pid_, "VmRSS"); }
uint64_t ServerProcess::PeakRssBytes() const { return StatusKb(pid_, "VmHWM"); }

std::string ServerProcess::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

}  // namespace ringkv::testing
