// MetricsServer: --metrics-listen, a small HTTP/1.1 endpoint on its own thread, apart from the
// workers: GET /metrics answers in Prometheus's text format (ServerMetrics, serialized by
// prometheus-cpp), GET /healthz answers 200 "ok" while serving and 503 once a stop has begun,
// for load balancers that do not speak gRPC. Anything else: 404 (405 for another method).
//
// Why not prometheus-cpp's own Exposer: its handlers cannot answer /healthz with 503, and it
// brings civetweb's thread pool; a scrape a few times a minute needs one thread and one
// connection at a time. Each connection gets one request and is closed; a client whose request
// line and headers are not in within 2 s, or run past 8 KiB, is dropped, and one that has not taken
// the answer 2 s after that is too, so a slow or hostile client delays a scrape by 4 s at most and
// costs the workers nothing.
//
// Threads: Bind, Start and Stop on the control thread; the endpoint's own thread reads the server's
// counters (ServerMetrics) while the server runs, and asks the Authenticator (which the caller
// keeps alive until Stop, and may Reload meanwhile) for each scrape's role.
//
//   auto metrics = MetricsServer::Bind("127.0.0.1:9464", server, /*tokens=*/nullptr).value();
//   metrics->Start();
//   metrics->Stop();
#ifndef RINGKV_SERVER_METRICS_METRICS_SERVER_H_
#define RINGKV_SERVER_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "net/listener.h"
#include "server/auth/authenticator.h"
#include "server/metrics/server_metrics.h"

namespace ringkv {

class MetricsServer {
 public:
  // Binds `address` (HOST:PORT; port 0 picks one); UNAVAILABLE naming it if it cannot.
  // Nothing is served before Start. `tokens` (may be null: /metrics is open) must outlive
  // the serving thread, which ends at Stop.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Bind(const std::string& address,
                                                             const MetricsSource& server,
                                                             const Authenticator* tokens);
  // Starts serving, on a thread of its own (once the server's loops and transport exist).
  void Start();
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return listener_->port(); }
  // Stops serving and joins the thread; idempotent.
  void Stop();

 private:
  MetricsServer(const MetricsSource& server, const Authenticator* tokens,
                std::unique_ptr<Listener> listener);
  void Run();
  void Serve(int fd);
  // The response to a request's head: its request line and headers, without the blank line.
  std::string Answer(std::string_view head);

  ServerMetrics metrics_;
  const MetricsSource& server_;
  const Authenticator* const tokens_;  // Null: /metrics is open. Its own lock guards its set.
  const std::unique_ptr<Listener> listener_;
  int stop_fd_ = -1;  // An eventfd: written by Stop, polled by Run.
  std::thread thread_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_METRICS_METRICS_SERVER_H_
