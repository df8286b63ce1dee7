#include "server/metrics/server_metrics.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ringkv/v1/kv.pb.h"
#include "server/handlers/methods.h"

namespace ringkv {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr const char* kCodeNames[CallMetrics::kCodes] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = "ringkv_" + std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

ClientMetric Value(MetricType type, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

// One value, no labels.
MetricFamily Single(std::string name, std::string help, MetricType type, double value) {
  MetricFamily family = Family(std::move(name), std::move(help), type);
  family.metric.push_back(Value(type, value));
  return family;
}

// The method label: "Get" for ringkv.v1.KV's, the full path for the others.
std::string MethodLabel(const Method& method) {
  const std::string_view path = method.path;
  if (method.service() == "ringkv.v1.KV") return std::string(path.substr(path.rfind('/') + 1));
  return std::string(path);
}

void AddCalls(const MetricsSource& server, std::vector<MetricFamily>* out) {
  MetricFamily calls =
      Family("calls_total", "Calls served, by method and gRPC status code.", MetricType::Counter);
  MetricFamily duration =
      Family("call_duration_seconds",
             "Time from a call's headers to its end (its answer handed to the socket), by "
             "method.",
             MetricType::Histogram);
  const std::vector<const CallMetrics*> loops = server.call_metrics();
  for (int m = 0; m < kMethodCount; ++m) {
    const Method& method = MethodOf(static_cast<MethodId>(m));
    const std::string label = MethodLabel(method);
    for (int code = 0; code < CallMetrics::kCodes; ++code) {
      uint64_t total = 0;
      for (const CallMetrics* loop : loops) total += loop->calls(method.id, code);
      if (total == 0) continue;
      calls.metric.push_back(Value(MetricType::Counter, static_cast<double>(total),
                                   {{"method", label}, {"code", kCodeNames[code]}}));
    }
    ClientMetric histogram;
    histogram.label = {{"method", label}};
    uint64_t cumulative = 0;
    uint64_t sum_ns = 0;
    for (int b = 0; b < CallMetrics::kBuckets; ++b) {
      for (const CallMetrics* loop : loops) cumulative += loop->bucket(method.id, b);
      histogram.histogram.bucket.push_back(
          {cumulative, b < CallMetrics::kBuckets - 1
                           ? static_cast<double>(CallMetrics::kBucketBoundsNs[b]) / 1e9
                           : std::numeric_limits<double>::infinity()});
    }
    for (const CallMetrics* loop : loops) sum_ns += loop->sum_ns(method.id);
    if (cumulative == 0) continue;
    histogram.histogram.sample_count = cumulative;
    histogram.histogram.sample_sum = static_cast<double>(sum_ns) / 1e9;
    duration.metric.push_back(std::move(histogram));
  }
  out->push_back(std::move(calls));
  out->push_back(std::move(duration));
}

// A figure of a per-shard or per-worker message, as a metric family.
template <typename Message>
struct Field {
  const char* name;
  const char* help;
  MetricType type;
  uint64_t (Message::*get)() const;
};

// A family per field, with a sample per item labelled `label` = the item's `id`.
template <typename Message, typename Items>
void AddPerItem(const std::vector<Field<Message>>& fields, const Items& items, const char* label,
                uint32_t (Message::*id)() const, std::vector<MetricFamily>* out) {
  for (const Field<Message>& field : fields) {
    MetricFamily family = Family(field.name, field.help, field.type);
    for (const Message& item : items) {
      family.metric.push_back(Value(field.type, static_cast<double>((item.*field.get)()),
                                    {{label, std::to_string((item.*id)())}}));
    }
    out->push_back(std::move(family));
  }
}

void AddShards(const ringkv::v1::StatsResponse& stats, std::vector<MetricFamily>* out) {
  const std::vector<Field<ringkv::v1::ShardStats>> fields = {
      {"keys", "Keys held, per shard.", MetricType::Gauge, &ringkv::v1::ShardStats::keys},
      {"payload_bytes", "Key and value bytes held, per shard.", MetricType::Gauge,
       &ringkv::v1::ShardStats::payload_bytes},
      {"memory_bytes", "Memory the shard's data holds (table, heap blocks, TTL index).",
       MetricType::Gauge, &ringkv::v1::ShardStats::memory_bytes},
      {"memory_limit_bytes", "The shard's share of --max-memory (0: none).", MetricType::Gauge,
       &ringkv::v1::ShardStats::memory_limit_bytes},
      {"table_bytes", "Of memory_bytes, the table's slots.", MetricType::Gauge,
       &ringkv::v1::ShardStats::table_bytes},
      {"arena_bytes",
       "What the arenas' segments hold (records of 129 bytes to 512 KiB), less pages given back.",
       MetricType::Gauge, &ringkv::v1::ShardStats::arena_bytes},
      {"arena_dead_bytes", "Of arena_bytes, what freed records left, not yet compacted.",
       MetricType::Gauge, &ringkv::v1::ShardStats::arena_dead_bytes},
      {"compacted_bytes_total", "Bytes of records the arenas' compaction moved.",
       MetricType::Counter, &ringkv::v1::ShardStats::compacted_bytes},
      {"ttl_keys", "Keys with a TTL, per shard.", MetricType::Gauge,
       &ringkv::v1::ShardStats::ttl_keys},
      {"ops_total", "Requests the shard ran.", MetricType::Counter, &ringkv::v1::ShardStats::ops},
      {"expired_keys_total", "Keys removed because their TTL passed.", MetricType::Counter,
       &ringkv::v1::ShardStats::expired},
      {"evicted_keys_total", "Keys evicted to stay under --max-memory.", MetricType::Counter,
       &ringkv::v1::ShardStats::evicted},
      {"ring_sent_total", "Requests and answers the shard's worker put on rings.",
       MetricType::Counter, &ringkv::v1::ShardStats::ring_sent},
      {"ring_received_total", "Requests and answers the shard's worker took off rings.",
       MetricType::Counter, &ringkv::v1::ShardStats::ring_received},
      {"ring_full_waits_total", "Sends that a full ring held back.", MetricType::Counter,
       &ringkv::v1::ShardStats::ring_full_waits},
  };
  AddPerItem(fields, stats.shards(), "shard", &ringkv::v1::ShardStats::shard, out);
}

void AddConnections(const Transport::Connections& c, std::vector<MetricFamily>* out) {
  if (!c.known) return;
  out->push_back(Single("connections_open", "Client connections open.", MetricType::Gauge,
                        static_cast<double>(c.open)));
  MetricFamily refused = Family("connections_refused_total",
                                "Client connections refused, by reason.", MetricType::Counter);
  const std::pair<const char*, uint64_t> reasons[] = {
      {"max_connections", c.refused_limit},
      {"file_descriptors", c.refused_descriptors},
      {"tls_handshake", c.refused_tls},
      {"handshake_timeout", c.refused_handshake_timeout}};
  for (const auto& [reason, count] : reasons) {
    refused.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(count), {{"reason", reason}}));
  }
  out->push_back(std::move(refused));
  MetricFamily closed =
      Family("connections_closed_total", "Open client connections the server closed, by reason.",
             MetricType::Counter);
  const std::pair<const char*, uint64_t> closes[] = {{"idle_timeout", c.closed_idle_timeout},
                                                     {"idle_evicted", c.closed_idle_evicted},
                                                     {"send_timeout", c.closed_send_timeout}};
  for (const auto& [reason, count] : closes) {
    closed.metric.push_back(
        Value(MetricType::Counter, static_cast<double>(count), {{"reason", reason}}));
  }
  out->push_back(std::move(closed));
}

void AddPersistence(const ringkv::v1::PersistenceStats& p, std::vector<MetricFamily>* out) {
  out->push_back(Single("persistence_log_bytes_total",
                        "Bytes written to this run's logs (--data-dir).", MetricType::Counter,
                        static_cast<double>(p.log_bytes())));
  out->push_back(Single("persistence_log_syncs_total", "fdatasyncs of this run's logs.",
                        MetricType::Counter, static_cast<double>(p.log_syncs())));
  out->push_back(Single("persistence_last_snapshot_timestamp_seconds",
                        "When the snapshot a restart would load was taken (0: none).",
                        MetricType::Gauge, static_cast<double>(p.snapshot_unix_ms()) / 1e3));
  out->push_back(Single("persistence_last_snapshot_keys", "Keys in that snapshot.",
                        MetricType::Gauge, static_cast<double>(p.snapshot_keys())));
  out->push_back(Single("persistence_last_snapshot_bytes", "Bytes of that snapshot.",
                        MetricType::Gauge, static_cast<double>(p.snapshot_bytes())));
  out->push_back(
      Single("persistence_failed",
             "1 while writes are refused because a log write or sync failed (out of space: until a "
             "retried write succeeds; otherwise until a restart); reads go on.",
             MetricType::Gauge, p.error().empty() ? 0 : 1));
}

// A replica's lag in time, and the delays of the messages it applied, per worker.
void AddReplicaDelays(const ringkv::v1::ReplicationStats& r, std::vector<MetricFamily>* out) {
  MetricFamily lag = Family("repl_lag_seconds",
                            "How long the oldest record of the last message the worker applied "
                            "took from its commit on the primary (0 once no record lags).",
                            MetricType::Gauge);
  MetricFamily delay = Family("repl_delay_seconds",
                              "Messages of the worker's flow applied, by how long their first "
                              "record took from its commit on the primary (wall clocks).",
                              MetricType::Histogram);
  for (const ringkv::v1::FlowStats& flow : r.flows()) {
    const std::string worker = std::to_string(flow.worker());
    lag.metric.push_back(Value(MetricType::Gauge, flow.lag_ms() / 1e3, {{"worker", worker}}));
    ClientMetric histogram;
    histogram.label = {{"worker", worker}};
    uint64_t cumulative = 0;
    for (int b = 0; b < flow.delay_buckets_size(); ++b) {
      cumulative += flow.delay_buckets(b);
      histogram.histogram.bucket.push_back(
          {cumulative, b < r.delay_bounds_ms_size() ? r.delay_bounds_ms(b) / 1e3
                                                    : std::numeric_limits<double>::infinity()});
    }
    histogram.histogram.sample_count = cumulative;
    histogram.histogram.sample_sum = flow.delay_sum_ms() / 1e3;
    delay.metric.push_back(std::move(histogram));
  }
  out->push_back(std::move(lag));
  out->push_back(std::move(delay));
}

// Per worker: a primary's flow positions and replicas, or a replica's lag and syncs.
void AddReplication(const ringkv::v1::ReplicationStats& r, std::vector<MetricFamily>* out) {
  out->push_back(Single("replica", "1 on a replica (--replica-of), 0 on a primary.",
                        MetricType::Gauge, r.role() == "replica" ? 1 : 0));
  using FlowField = Field<ringkv::v1::FlowStats>;
  const bool replica = r.role() == "replica";
  const std::vector<FlowField> fields =
      replica
          ? std::vector<FlowField>{{"repl_applied_lsn", "Records of the worker's flow applied.",
                                    MetricType::Gauge, &ringkv::v1::FlowStats::applied_lsn},
                                   {"repl_lag_records",
                                    "Records the primary has made that the worker has not "
                                    "applied yet (as last heard).",
                                    MetricType::Gauge, &ringkv::v1::FlowStats::lag_records},
                                   {"repl_lag_bytes",
                                    "Bytes of the records the primary has made that the worker "
                                    "has not applied yet (as last heard).",
                                    MetricType::Gauge, &ringkv::v1::FlowStats::lag_bytes},
                                   {"repl_full_syncs_total", "Full syncs of the worker's flow.",
                                    MetricType::Counter, &ringkv::v1::FlowStats::full_syncs},
                                   {"repl_partial_syncs_total",
                                    "Reconnections of the worker's flow that went on from "
                                    "its position.",
                                    MetricType::Counter, &ringkv::v1::FlowStats::partial_syncs},
                                   {"repl_dropped_records_total",
                                    "Records the worker held past where its new primary's "
                                    "history continued its own (a deposed primary's writes "
                                    "that never reached the new one), dropped by full syncs.",
                                    MetricType::Counter, &ringkv::v1::FlowStats::dropped_records},
                                   {"repl_dropped_keys_total",
                                    "The distinct keys those dropped records wrote (of those "
                                    "still kept: at least).",
                                    MetricType::Counter, &ringkv::v1::FlowStats::dropped_keys}}
          : std::vector<FlowField>{{"repl_lsn", "Records the worker's flow has made.",
                                    MetricType::Gauge, &ringkv::v1::FlowStats::lsn},
                                   {"repl_backlog_bytes", "Bytes of the worker's backlog.",
                                    MetricType::Gauge, &ringkv::v1::FlowStats::backlog_bytes},
                                   {"repl_acked_lsn",
                                    "The position up to which the most advanced replica has "
                                    "applied the worker's flow, as it acknowledged.",
                                    MetricType::Gauge, &ringkv::v1::FlowStats::acked_lsn},
                                   {"repl_not_replicated_total",
                                    "Writes that waited for replicas (--min-replicas) past "
                                    "--min-replicas-timeout.",
                                    MetricType::Counter, &ringkv::v1::FlowStats::not_replicated}};
  if (r.has_group()) {
    out->push_back(Single("group_term", "The term of the group's leader this server saw last.",
                          MetricType::Gauge, static_cast<double>(r.group().term())));
    out->push_back(Single("group_leading", "1 while this server leads its group.",
                          MetricType::Gauge, r.group().leading() ? 1 : 0));
    out->push_back(Single("group_fence_left_seconds",
                          "How long this server may still acknowledge writes (0: it may not).",
                          MetricType::Gauge, r.group().fence_left_ms() / 1000.0));
  }
  AddPerItem(fields, r.flows(), "worker", &ringkv::v1::FlowStats::worker, out);
  MetricFamily flows =
      Family(replica ? "repl_stable" : "repl_replicas",
             replica ? "1 while the worker's flow is connected and past its full sync."
                     : "Replicas streaming the worker's flow now.",
             MetricType::Gauge);
  for (const ringkv::v1::FlowStats& flow : r.flows()) {
    flows.metric.push_back(Value(MetricType::Gauge,
                                 replica ? (flow.state() == "stable" ? 1 : 0) : flow.replicas(),
                                 {{"worker", std::to_string(flow.worker())}}));
  }
  out->push_back(std::move(flows));
  if (replica) AddReplicaDelays(r, out);
}

}  // namespace

std::vector<MetricFamily> ServerMetrics::Collect() const {
  ringkv::v1::StatsResponse stats;
  server_.context().FillStats(&stats);
  const ServerOptions& options = server_.context().options();
  std::vector<MetricFamily> out;

  MetricFamily build =
      Family("build_info", "Always 1; the labels say what runs.", MetricType::Gauge);
  build.metric.push_back(
      Value(MetricType::Gauge, 1,
            {{"version", RINGKV_VERSION},
             {"transport", options.transport == TransportKind::kH2 ? "h2" : "grpc"},
             {"engine", stats.engine()},
             {"tls", options.tls.cert.empty() ? "off" : "on"},
             {"auth", options.auth_token_file.empty() ? "off" : "on"}}));
  out.push_back(std::move(build));
  out.push_back(Single("serving", "1 while serving; 0 once a stop has begun (draining).",
                       MetricType::Gauge, server_.context().shutting_down() ? 0 : 1));
  out.push_back(Single("uptime_seconds", "Seconds since the server started.", MetricType::Gauge,
                       stats.uptime_seconds()));
  out.push_back(Single("workers", "Worker threads (--threads), one shard each.", MetricType::Gauge,
                       static_cast<double>(options.threads)));
  AddCalls(server_, &out);
  AddShards(stats, &out);
  out.push_back(Single("ring_in_flight", "Requests and answers in rings now.", MetricType::Gauge,
                       static_cast<double>(stats.ring_in_flight())));
  AddConnections(server_.connections(), &out);
  out.push_back(Single("process_resident_memory_bytes",
                       "The whole process's resident memory (VmRSS), as `ringkv stats` says.",
                       MetricType::Gauge, static_cast<double>(stats.process_resident_bytes())));
  out.push_back(Single("data_memory_bytes",
                       "The shards' data (the sum of ringkv_memory_bytes), as --max-memory counts "
                       "it and `ringkv stats` says.",
                       MetricType::Gauge, static_cast<double>(stats.data_memory_bytes())));
  out.push_back(Single("reply_memory_bytes",
                       "Bytes of values that answers hold until they have left their calls, as "
                       "--max-reply-memory counts them (values of 1 KiB or more).",
                       MetricType::Gauge, static_cast<double>(stats.reply_memory_bytes())));
  out.push_back(Single("reply_memory_limit_bytes", "--max-reply-memory.", MetricType::Gauge,
                       static_cast<double>(stats.max_reply_memory_bytes())));
  out.push_back(Single("jemalloc_allocated_bytes",
                       "jemalloc's stats.allocated: the heap only, not tables of 2 MiB and more.",
                       MetricType::Gauge, static_cast<double>(stats.memory_allocated_bytes())));
  out.push_back(Single("jemalloc_resident_bytes", "jemalloc's stats.resident: the heap only.",
                       MetricType::Gauge, static_cast<double>(stats.memory_resident_bytes())));
  if (stats.has_persistence()) AddPersistence(stats.persistence(), &out);
  AddReplication(stats.replication(), &out);
  return out;
}

}  // namespace ringkv
