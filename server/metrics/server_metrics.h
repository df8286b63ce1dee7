// ServerMetrics: ringkv-server's Prometheus metrics, gathered at scrape time from counters the
// workers keep anyway (nothing is added to the hot path but each loop's CallMetrics, and that
// only with --metrics-listen). A prometheus::Collectable: prometheus-cpp's TextSerializer
// writes what Collect returns in the text exposition format.
//
// Families (all prefixed ringkv_): build_info; serving; uptime_seconds; calls_total and
// call_duration_seconds by method (and code); per shard: keys, payload_bytes, memory_bytes,
// memory_limit_bytes, ttl_keys, ops_total, expired_keys_total, evicted_keys_total,
// ring_sent_total, ring_received_total, ring_full_waits_total; ring_in_flight;
// connections_open and connections_refused_total by reason (h2); process_resident_memory_bytes
// and data_memory_bytes (as `ringkv stats` gives them); jemalloc_allocated_bytes and
// jemalloc_resident_bytes; with --data-dir, persistence_* (log bytes and syncs, the last
// snapshot's time, keys and bytes, whether writes are refused after a disk error).
//
// Threads: Collect from the scrape thread, while the server runs.
//
//   ServerMetrics metrics(server);
//   prometheus::TextSerializer().Serialize(out, metrics.Collect());
#ifndef RINGKV_SERVER_METRICS_SERVER_METRICS_H_
#define RINGKV_SERVER_METRICS_SERVER_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <vector>

#include "server/metrics/metrics_source.h"

namespace ringkv {

class ServerMetrics : public prometheus::Collectable {
 public:
  explicit ServerMetrics(const MetricsSource& server) : server_(server) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const MetricsSource& server_;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_METRICS_SERVER_METRICS_H_
