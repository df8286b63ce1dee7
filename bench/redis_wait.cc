// redis-wait: SET then WAIT NUMREPLICAS 0 against Redis, from CONNECTIONS connections at once,
// for SECONDS: the shape of a ringkv PUT under --min-replicas (one write in flight per
// connection, answered once the replicas have it), which redis-benchmark cannot make. Keys
// are "key:" and a number below KEYS (redis-benchmark's -r naming), values VALUE_SIZE bytes.
// Each connection sends the two commands in one write and reads both replies; a WAIT that
// answers fewer replicas than asked counts as a failure. Prints one line of JSON:
// {"ops": N, "ops_per_s": R, "short": F} (ops: SETs whose WAIT answered).
//
// Usage: redis-wait PORT CONNECTIONS SECONDS KEYS VALUE_SIZE NUMREPLICAS
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Totals {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> short_waits{0};
  std::atomic<bool> failed{false};
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Reads until `buffer` holds two whole one-line replies (+OK and :N, or errors); returns
// WAIT's number, or -1 if the connection failed or a reply was an error.
long ReadTwoReplies(int fd, std::string& buffer) {
  for (;;) {
    const size_t first = buffer.find("\r\n");
    const size_t second = first == std::string::npos ? first : buffer.find("\r\n", first + 2);
    if (second != std::string::npos) {
      if (buffer[0] != '+' || buffer[first + 2] != ':') return -1;
      const long n = std::strtol(buffer.c_str() + first + 3, nullptr, 10);
      buffer.erase(0, second + 2);
      return n;
    }
    char chunk[4096];
    const ssize_t got = read(fd, chunk, sizeof chunk);
    if (got <= 0) return -1;
    buffer.append(chunk, static_cast<size_t>(got));
  }
}

void Run(int port, int seconds, uint64_t keys, size_t value_size, long replicas, int seed,
         Totals& totals) {
  const int fd = Connect(port);
  if (fd < 0) {
    totals.failed = true;
    return;
  }
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  const std::string value(value_size, 'x');
  const std::string wait = "*3\r\n$4\r\nWAIT\r\n$" +
                           std::to_string(std::to_string(replicas).size()) + "\r\n" +
                           std::to_string(replicas) + "\r\n$1\r\n0\r\n";
  std::string out;
  std::string in;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    char key[32];
    const int key_len =
        std::snprintf(key, sizeof key, "key:%012lu", static_cast<unsigned long>(rng() % keys));
    out = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key_len) + "\r\n" + key + "\r\n$" +
          std::to_string(value_size) + "\r\n" + value + "\r\n" + wait;
    if (write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
      totals.failed = true;
      break;
    }
    const long acked = ReadTwoReplies(fd, in);
    if (acked < 0) {
      totals.failed = true;
      break;
    }
    if (acked < replicas) totals.short_waits.fetch_add(1, std::memory_order_relaxed);
    totals.ops.fetch_add(1, std::memory_order_relaxed);
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr,
                 "usage: redis-wait PORT CONNECTIONS SECONDS KEYS VALUE_SIZE NUMREPLICAS\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const int connections = std::atoi(argv[2]);
  const int seconds = std::atoi(argv[3]);
  const uint64_t keys = std::strtoull(argv[4], nullptr, 10);
  const size_t value_size = std::strtoull(argv[5], nullptr, 10);
  const long replicas = std::atol(argv[6]);
  if (port <= 0 || connections <= 0 || seconds <= 0 || keys == 0 || replicas < 0) {
    std::fprintf(stderr, "redis-wait: bad arguments\n");
    return 2;
  }
  Totals totals;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back(Run, port, seconds, keys, value_size, replicas, i + 1, std::ref(totals));
  }
  for (std::thread& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"ops\": %lu, \"ops_per_s\": %.0f, \"short\": %lu}\n",
              static_cast<unsigned long>(totals.ops.load()), totals.ops.load() / elapsed,
              static_cast<unsigned long>(totals.short_waits.load()));
  if (totals.failed) {
    std::fprintf(stderr, "redis-wait: a connection failed or got an error reply\n");
    return 1;
  }
  return 0;
}
