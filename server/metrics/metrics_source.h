// MetricsSource: what the /metrics endpoint (server/metrics/) reads of a running server: the
// ServerContext (options, whether it drains, the Stats figures), each loop's call counters, and
// the transport's connection counts. Server implements it (server/server.h).
//
// Threads: any, while the server runs (the scrape thread reads it).
#ifndef RINGKV_SERVER_METRICS_METRICS_SOURCE_H_
#define RINGKV_SERVER_METRICS_METRICS_SOURCE_H_

#include <vector>

#include "server/metrics/call_metrics.h"
#include "server/server_context.h"
#include "server/transport.h"

namespace ringkv {

class MetricsSource {
 public:
  virtual const ServerContext& context() const = 0;
  // One per loop; what the transports counted there.
  virtual std::vector<const CallMetrics*> call_metrics() const = 0;
  virtual Transport::Connections connections() const = 0;

 protected:
  ~MetricsSource() = default;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_METRICS_METRICS_SOURCE_H_
