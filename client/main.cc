// ringkv: the command-line client of ringkv-server.
//
//   ringkv [--addr=HOST:PORT] [--json] [--timeout=SECONDS] COMMAND ARGS...
//     get KEY              print the value (raw bytes); --json adds its version and TTL
//     put KEY VALUE        store VALUE; VALUE "-" reads it from stdin (binary-safe);
//                          --ttl=DURATION, and at most one of --if-absent, --if-present,
//                          --if-version=N
//     del KEY              remove the key; --if-version=N
//     ttl KEY              the milliseconds the key has left, or -1 if it has no TTL
//     expire KEY DURATION  give the key a TTL
//     persist KEY          remove the key's TTL
//     incr KEY [DELTA]     add DELTA (default 1, may be negative) to a decimal counter; prints
//                          the sum
//     mget KEY...          one line per key: KEY<TAB>VALUE, or KEY<TAB>(not found)
//     mput KEY=VALUE...    store several; one line per item; --ttl and --if-absent/--if-present
//                          apply to each
//     scan                 every key, one per line (raw bytes); --prefix=P only those starting
//                          with P; --limit=N stops after N keys, and then names the --cursor=C
//                          that goes on from there (on stderr; in --json output, "cursor")
//     stats                per-shard counters, memory, uptime
//     snapshot             a snapshot of the data (--data-dir), once it is durable
// A DURATION is a whole number of seconds ("30"), or a number with a unit: "1500ms", "10s",
// "1.5h". With --json the output is one JSON document on stdout.
//
// Exit status: 0 ok, 1 not found (any key, for mget), 2 usage error (the command line is wrong:
// nothing was sent), 3 server or connection error (a full --max-memory or a failed disk among
// them, with the server's message), 4 the server refused the operation and nothing was
// written (a condition failed, incr of a value that is not an integer or past 64 bits, a key,
// value or TTL past the server's limits); for mget and mput, that of the first item that
// failed; 5 refused by the server's auth (no token, an unknown one, or one whose role does not
// allow the call). Errors are one line on stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/command_line.h"
#include "base/exit.h"
#include "client/client.h"
#include "cluster/etcd_client.h"
#include "cluster/membership.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, addr, "",
          "ringkv-server address, HOST:PORT (default 127.0.0.1:50051, or none with --etcd); "
          "several, comma-separated, are the servers of a group: a call goes to whichever is "
          "the primary, and follows it through a failover (see --failover-wait)");
ABSL_FLAG(bool, json, false, "machine-readable output: one JSON document on stdout");
ABSL_FLAG(double, timeout, 0,
          "seconds to wait for the server before giving up (default: 5, and 600 for snapshot)");
ABSL_FLAG(std::string, ttl, "",
          "put, mput: the key expires this long after the write (a DURATION: 30, 1500ms, 10s, "
          "1.5h); without it, a put removes any TTL the key had");
ABSL_FLAG(uint32_t, min_replicas, 0,
          "writes: the answer waits until this many replicas have applied the write (sent as the "
          "ringkv-min-replicas header; the server's --min-replicas applies if more). UNAVAILABLE "
          "if fewer follow the server (the write was not run), or if they took longer than its "
          "--min-replicas-timeout (it was run there, and may yet reach them)");
ABSL_FLAG(bool, linearizable, false,
          "get, mget, scan: answered only by the primary (in a group, the elected one within "
          "its lease), so the answer reflects every write acknowledged before it was asked "
          "(sent as the ringkv-consistency header); a replica refuses, naming its primary. "
          "Without it any server answers from what it holds");
ABSL_FLAG(std::string, to, "",
          "replicate: follow the primary at HOST:PORT (a full sync from it); failover: the "
          "replica to hand the group's leadership to (default: the most advanced)");
ABSL_FLAG(bool, stop, false,
          "replicate: stop following the primary and serve writes (a manual promotion; "
          "answered once every worker has applied what it had received)");
ABSL_FLAG(std::string, etcd, "",
          "the etcd endpoints (HOST:PORT[,HOST:PORT...]) that keep the group (with --group): "
          "calls go to the primary its leader key names, and follow it through a failover; "
          "cluster status reads the group from there");
ABSL_FLAG(std::string, group, "", "with --etcd: the group's name (the servers' --group)");
ABSL_FLAG(std::string, etcd_ca, "",
          "with --etcd: talk to etcd over TLS, trusting the CAs in this PEM file (an https:// "
          "endpoint alone uses the system's CAs)");
ABSL_FLAG(std::string, etcd_cert, "", "with --etcd: the PEM client certificate etcd asks for");
ABSL_FLAG(std::string, etcd_key, "", "the PEM private key of --etcd-cert");
ABSL_FLAG(double, failover_wait, 10,
          "with --etcd or several --addr: seconds a call may go on finding the primary and "
          "being sent again after a failover. A read is sent again after any failure; a write "
          "only if it certainly did not run (refused by a server that is not the primary, or "
          "no connection made), so none is applied twice; one whose fate is unknown fails, "
          "saying it may have been applied");
ABSL_FLAG(bool, if_absent, false, "put, mput: write only if the key does not exist");
ABSL_FLAG(bool, if_present, false, "put, mput: write only if the key exists");
ABSL_FLAG(std::string, prefix, "", "scan: only keys that start with this");
ABSL_FLAG(uint64_t, limit, 0, "scan: stop after this many keys (0: all)");
ABSL_FLAG(uint64_t, cursor, 0, "scan: go on from where an earlier scan stopped");
ABSL_FLAG(std::string, token_file, "",
          "send the bearer token in this file with every call (its first line, or the first "
          "field of its first line: a line of the server's --auth-token-file works); without "
          "it, the RINGKV_TOKEN environment variable, if set");
ABSL_FLAG(bool, tls, false,
          "connect with TLS, trusting the system's CAs (implied by --tls-ca, --tls-cert)");
ABSL_FLAG(std::string, tls_ca, "", "connect with TLS, trusting the CAs in this PEM file");
ABSL_FLAG(std::string, tls_cert, "",
          "present this PEM client certificate (for a server with --tls-client-ca); needs "
          "--tls-key");
ABSL_FLAG(std::string, tls_key, "", "the PEM private key of --tls-cert");
ABSL_FLAG(std::optional<uint64_t>, if_version, std::nullopt,
          "put, del: write only if the key's version is N (get --json shows it); 0: only if "
          "the key does not exist");

namespace ringkv {
namespace {

constexpr int kOk = 0;
constexpr int kNotFound = 1;
constexpr int kUsage = 2;
constexpr int kServerError = 3;
constexpr int kRefusedOperation = 4;
constexpr int kRefused = 5;

// The longest TTL the server accepts: 100 years.
constexpr int64_t kMaxTtlMs = int64_t{100} * 365 * 24 * 3600 * 1000;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "ringkv: %s\n", message.c_str());
  return code;
}

// The exit status for a failed call (or batch item).
int ExitCodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kOk;
    case absl::StatusCode::kNotFound:
      return kNotFound;
    // The server's answers: the CLI's own usage errors never reach here.
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return kRefusedOperation;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kRefused;
    default:  // RESOURCE_EXHAUSTED (--max-memory) and the server's or the network's errors.
      return kServerError;
  }
}

// A batch's exit status: that of its first item that failed otherwise than NOT_FOUND, else 1 if
// any was not found, else 0.
int BatchExitCode(const std::vector<Client::Item>& items) {
  int rc = kOk;
  for (const Client::Item& item : items) {
    const int code = ExitCodeOf(item.status);
    if (code != kOk && code != kNotFound) return code;
    if (code == kNotFound) rc = kNotFound;
  }
  return rc;
}

int FailStatus(const absl::Status& status, std::string_view key = {}) {
  if (status.code() == absl::StatusCode::kNotFound && !key.empty()) {
    return Fail(kNotFound, absl::StrCat("key not found: ", std::string(key)));
  }
  return Fail(ExitCodeOf(status), std::string(status.message()));
}

// A JSON string of arbitrary bytes: printable ASCII as is, anything else as \u00XX (each byte
// one code point, so the bytes can be recovered exactly).
std::string JsonString(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("\\u%04x", c);
    }
  }
  return out + "\"";
}

void PrintRaw(std::string_view value) {
  std::fwrite(value.data(), 1, value.size(), stdout);
  if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);  // A terminal gets its line back.
}

// A DURATION (see the top of this file) in milliseconds, 1 ms .. 100 years.
std::optional<int64_t> ParseTtl(const std::string& text, std::string* error) {
  absl::Duration d;
  int64_t seconds;
  if (absl::SimpleAtoi(text, &seconds) && absl::ascii_isdigit(text[0])) {
    d = seconds > kMaxTtlMs / 1000 ? absl::InfiniteDuration() : absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    *error = absl::StrCat("'", text, "' is not a duration (30, 1500ms, 10s, 1.5h)");
    return std::nullopt;
  }
  if (d < absl::Milliseconds(1) || d > absl::Milliseconds(kMaxTtlMs)) {
    *error = absl::StrCat("a TTL must be 1ms .. 100 years, got '", text, "'");
    return std::nullopt;
  }
  return absl::ToInt64Milliseconds(d);
}

struct Invocation {
  Client& client;
  const std::vector<std::string>& operands;
  bool json;
  PutOptions put;  // From --ttl and the --if-* flags.
};

void PrintOk(const Invocation& in) { std::printf(in.json ? "{\"ok\":true}\n" : "OK\n"); }

int Get(Invocation& in) {
  const std::string& key = in.operands[0];
  absl::StatusOr<Client::Entry> entry = in.client.GetEntry(key);
  if (!entry.ok()) return FailStatus(entry.status(), key);
  if (in.json) {
    std::printf("{\"key\":%s,\"value\":%s,\"version\":%lu,\"ttl_ms\":%ld}\n",
                JsonString(key).c_str(), JsonString(entry->value).c_str(), entry->version,
                entry->ttl_ms);
  } else {
    PrintRaw(entry->value);
  }
  return kOk;
}

int Put(Invocation& in) {
  std::string value = in.operands[1];
  if (value == "-") {
    std::cin >> std::noskipws;
    value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  absl::StatusOr<uint64_t> version = in.client.Put(in.operands[0], value, in.put);
  if (!version.ok()) return FailStatus(version.status());
  if (in.json) {
    std::printf("{\"ok\":true,\"version\":%lu}\n", *version);
  } else {
    std::printf("OK\n");
  }
  return kOk;
}

int Del(Invocation& in) {
  const std::string& key = in.operands[0];
  if (absl::Status s = in.client.Delete(key, in.put.condition); !s.ok()) {
    return FailStatus(s, key);
  }
  PrintOk(in);
  return kOk;
}

int Ttl(Invocation& in) {
  const std::string& key = in.operands[0];
  absl::StatusOr<Client::Entry> entry = in.client.GetEntry(key);
  if (!entry.ok()) return FailStatus(entry.status(), key);
  if (in.json) {
    std::printf("{\"key\":%s,\"ttl_ms\":%ld}\n", JsonString(key).c_str(), entry->ttl_ms);
  } else {
    std::printf("%ld\n", entry->ttl_ms);
  }
  return kOk;
}

int Expire(Invocation& in) {
  const std::string& key = in.operands[0];
  std::string error;
  std::optional<int64_t> ttl_ms = ParseTtl(in.operands[1], &error);
  if (!ttl_ms) return Fail(kUsage, absl::StrCat("expire: ", error));
  if (absl::Status s = in.client.Expire(key, *ttl_ms); !s.ok()) return FailStatus(s, key);
  PrintOk(in);
  return kOk;
}

int Persist(Invocation& in) {
  const std::string& key = in.operands[0];
  if (absl::Status s = in.client.Persist(key); !s.ok()) return FailStatus(s, key);
  PrintOk(in);
  return kOk;
}

int Incr(Invocation& in) {
  int64_t delta = 1;
  if (in.operands.size() == 2 && !absl::SimpleAtoi(in.operands[1], &delta)) {
    return Fail(kUsage, absl::StrCat("incr: DELTA '", in.operands[1], "' is not a 64-bit integer"));
  }
  absl::StatusOr<int64_t> sum = in.client.Increment(in.operands[0], delta);
  if (!sum.ok()) return FailStatus(sum.status());
  if (in.json) {
    std::printf("{\"key\":%s,\"value\":%ld}\n", JsonString(in.operands[0]).c_str(), *sum);
  } else {
    std::printf("%ld\n", *sum);
  }
  return kOk;
}

int Mget(Invocation& in) {
  auto items = in.client.MultiGet(in.operands);
  if (!items.ok()) return FailStatus(items.status());
  std::string out = in.json ? "[" : "";
  for (size_t i = 0; i < items->size(); ++i) {
    const Client::Item& item = (*items)[i];
    const std::string& key = in.operands[i];
    if (in.json) {
      absl::StrAppend(
          &out, i ? "," : "", "{\"key\":", JsonString(key),
          item.status.ok()
              ? absl::StrCat(",\"value\":", JsonString(item.value), ",\"version\":", item.version)
              : ",\"error\":" + JsonString(std::string(item.status.message())),
          "}");
    } else {
      absl::StrAppend(&out, key, "\t",
                      item.status.ok() ? item.value
                      : item.status.code() == absl::StatusCode::kNotFound
                          ? std::string("(not found)")
                          : absl::StrCat("(error: ", item.status.message(), ")"),
                      "\n");
    }
  }
  if (in.json) out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return BatchExitCode(*items);
}

int Mput(Invocation& in) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& operand : in.operands) {
    const size_t eq = operand.find('=');
    if (eq == std::string::npos) {
      return Fail(kUsage, absl::StrCat("mput: '", operand, "' is not KEY=VALUE"));
    }
    pairs.emplace_back(operand.substr(0, eq), operand.substr(eq + 1));
  }
  auto items = in.client.MultiPut(pairs, in.put);
  if (!items.ok()) return FailStatus(items.status());
  std::string out = in.json ? "[" : "";
  for (size_t i = 0; i < items->size(); ++i) {
    const Client::Item& item = (*items)[i];
    const absl::Status& s = item.status;
    if (in.json) {
      absl::StrAppend(&out, i ? "," : "", "{\"key\":", JsonString(pairs[i].first),
                      s.ok() ? absl::StrCat(",\"ok\":true,\"version\":", item.version)
                             : ",\"error\":" + JsonString(std::string(s.message())),
                      "}");
    } else {
      absl::StrAppend(&out, pairs[i].first, "\t",
                      s.ok() ? std::string("OK") : absl::StrCat("(error: ", s.message(), ")"),
                      "\n");
    }
  }
  if (in.json) out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return BatchExitCode(*items);
}

int Scan(Invocation& in) {
  // Pages of up to kPage keys, the last cut to what --limit leaves, so that the cursor it ends
  // on resumes exactly after the last key printed.
  constexpr uint64_t kPage = 1000;
  const std::string prefix = absl::GetFlag(FLAGS_prefix);
  const uint64_t limit = absl::GetFlag(FLAGS_limit);
  uint64_t cursor = absl::GetFlag(FLAGS_cursor);
  uint64_t printed = 0;
  std::string json = "{\"keys\":[";
  do {
    const uint64_t want = limit == 0 ? kPage : std::min(kPage, limit - printed);
    absl::StatusOr<Client::ScanPage> page =
        in.client.Scan(cursor, prefix, static_cast<uint32_t>(want));
    if (!page.ok()) return FailStatus(page.status());
    for (const std::string& key : page->keys) {
      if (in.json) {
        absl::StrAppend(&json, printed > 0 ? "," : "", JsonString(key));
      } else {
        std::fwrite(key.data(), 1, key.size(), stdout);
        std::fputc('\n', stdout);
      }
      ++printed;
    }
    cursor = page->cursor;
  } while (cursor != 0 && (limit == 0 || printed < limit));
  if (in.json) {
    std::printf("%s],\"cursor\":%lu}\n", json.c_str(), cursor);
  } else if (cursor != 0) {
    std::fprintf(stderr, "ringkv: stopped at --limit=%lu; --cursor=%lu goes on from here\n", limit,
                 cursor);
  }
  return kOk;
}

// The bound of the bucket that holds the 99th percentile of a replica's message delays, as
// "<= N ms" (or "> N ms" past the last bound); empty without any.
std::string DelayP99(const ringkv::v1::ReplicationStats& r, const ringkv::v1::FlowStats& f) {
  uint64_t total = 0;
  for (uint64_t count : f.delay_buckets()) total += count;
  if (total == 0) return "";
  uint64_t seen = 0;
  for (int b = 0; b < f.delay_buckets_size(); ++b) {
    seen += f.delay_buckets(b);
    if (seen * 100 < total * 99) continue;
    if (b < r.delay_bounds_ms_size()) return absl::StrFormat("<= %g ms", r.delay_bounds_ms(b));
    break;
  }
  return r.delay_bounds_ms_size() > 0
             ? absl::StrFormat("> %g ms", r.delay_bounds_ms(r.delay_bounds_ms_size() - 1))
             : "";
}

// One line for the role, then one per worker: a primary's flow, or a replica's.
void PrintReplication(const ringkv::v1::ReplicationStats& r) {
  if (r.has_group()) {
    const ringkv::v1::GroupStats& g = r.group();
    const std::string leader = g.leading()          ? "this server leads"
                               : g.leader().empty() ? "no leader seen now"
                                                    : "led by " + g.leader();
    const std::string fence =
        g.fence_left_ms() > 0
            ? absl::StrCat("writes acknowledged for ", g.fence_left_ms(), " ms more unless renewed")
            : "writes refused here";
    std::printf("group %s: term %lu, %s, %s\n", g.name().c_str(), g.term(), leader.c_str(),
                fence.c_str());
  }
  if (r.role() == "replica") {
    std::printf("replication: replica of %s\n", r.primary().c_str());
    for (const auto& f : r.flows()) {
      const std::string p99 = DelayP99(r, f);
      // Writes taken as a deposed primary that its new primary never got: dropped.
      const std::string dropped =
          f.dropped_records() == 0
              ? ""
              : absl::StrCat("; dropped ", f.dropped_records(), " records on ", f.dropped_keys(),
                             " keys it took as a deposed primary");
      std::printf(
          "  worker %u: %s, applied %lu, lag %lu records, %lu bytes, %.3f ms, %lu full syncs, "
          "%lu partial%s%s%s%s%s\n",
          f.worker(), f.state().c_str(), f.applied_lsn(), f.lag_records(), f.lag_bytes(),
          f.lag_ms(), f.full_syncs(), f.partial_syncs(), p99.empty() ? "" : "; delay p99 ",
          p99.c_str(), dropped.c_str(),
          f.last_error().empty() ? "" : "; last error: ", f.last_error().c_str());
    }
    return;
  }
  std::printf("replication: primary, backlog %.1f MiB per worker\n",
              r.backlog_limit_bytes() / 1048576.0);
  for (const auto& f : r.replicas()) {
    std::printf("  replica %s: worker %u, %s, acknowledged %lu, lag %lu records\n",
                f.address().c_str(), f.worker(), f.state().c_str(), f.acked_lsn(), f.lag_records());
  }
  for (const auto& f : r.flows()) {
    if (f.lsn() == 0 && f.replicas() == 0) continue;  // No replica ever followed it.
    std::printf(
        "  worker %u: %u replicas, at %lu, acknowledged %lu, backlog from %lu (%.1f MiB), %lu "
        "writes not replicated in time\n",
        f.worker(), f.replicas(), f.lsn(), f.acked_lsn(), f.backlog_first_lsn(),
        f.backlog_bytes() / 1048576.0, f.not_replicated());
  }
}

int Stats(Invocation& in) {
  auto stats = in.client.Stats();
  if (!stats.ok()) return FailStatus(stats.status());
  if (in.json) {
    std::string out;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(*stats, &out, options);
    std::printf("%s\n", out.c_str());
    return kOk;
  }
  std::printf("engine %s%s, uptime %.1f s\n", stats->engine().c_str(),
              stats->ring().empty() ? "" : (" (" + stats->ring() + " rings)").c_str(),
              stats->uptime_seconds());
  // The process first: what the kernel sees. Then the data as --max-memory counts it, and
  // jemalloc's heap, which holds the values but not the tables of 2 MiB and more.
  std::printf(
      "memory: %.1f MiB resident (the process), %.1f MiB of data (the shards, as --max-memory "
      "counts), jemalloc heap %.1f MiB allocated, %.1f MiB resident\n",
      stats->process_resident_bytes() / 1048576.0, stats->data_memory_bytes() / 1048576.0,
      stats->memory_allocated_bytes() / 1048576.0, stats->memory_resident_bytes() / 1048576.0);
  std::printf("answers: %.1f MiB of values held until sent, of --max-reply-memory %.1f MiB\n",
              stats->reply_memory_bytes() / 1048576.0, stats->max_reply_memory_bytes() / 1048576.0);
  if (stats->max_memory_bytes() == 0) {
    std::printf("max memory: none\n");
  } else {
    std::printf("max memory: %.1f MiB, eviction %s\n", stats->max_memory_bytes() / 1048576.0,
                stats->eviction().c_str());
  }
  if (!stats->has_persistence()) {
    std::printf("persistence: none (in memory only)\n");
  } else {
    const auto& p = stats->persistence();
    std::printf(
        "persistence: %s, fsync %s, log %.1f MiB in %lu syncs this run, restored %lu "
        "keys in %.3f s\n",
        p.data_dir().c_str(), p.fsync().c_str(), p.log_bytes() / 1048576.0, p.log_syncs(),
        p.restored_keys(), p.restore_seconds());
    if (p.snapshot_unix_ms() == 0) {
      std::printf("last snapshot: none\n");
    } else {
      const std::string taken =
          absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", absl::FromUnixMillis(p.snapshot_unix_ms()),
                           absl::LocalTimeZone());
      std::printf("last snapshot: %s, %lu keys, %.1f MiB\n", taken.c_str(), p.snapshot_keys(),
                  p.snapshot_bytes() / 1048576.0);
    }
    if (!p.error().empty()) std::printf("WRITES REFUSED: %s\n", p.error().c_str());
  }
  PrintReplication(stats->replication());
  std::printf("%-6s %12s %14s %11s %10s %10s %9s %12s %12s %12s %14s %12s %12s %10s\n", "shard",
              "keys", "payload_bytes", "memory_MiB", "limit_MiB", "arena_MiB", "dead_MiB",
              "ttl_keys", "expired", "evicted", "ops", "ring_sent", "ring_recv", "full_waits");
  for (const auto& s : stats->shards()) {
    const std::string limit = s.memory_limit_bytes() == 0
                                  ? std::string("-")
                                  : absl::StrFormat("%.1f", s.memory_limit_bytes() / 1048576.0);
    std::printf(
        "%-6u %12lu %14lu %11.1f %10s %10.1f %9.1f %12lu %12lu %12lu %14lu %12lu %12lu %10lu\n",
        s.shard(), s.keys(), s.payload_bytes(), s.memory_bytes() / 1048576.0, limit.c_str(),
        s.arena_bytes() / 1048576.0, s.arena_dead_bytes() / 1048576.0, s.ttl_keys(), s.expired(),
        s.evicted(), s.ops(), s.ring_sent(), s.ring_received(), s.ring_full_waits());
  }
  std::printf("in rings now: %lu\n", stats->ring_in_flight());
  return kOk;
}

int Snapshot(Invocation& in) {
  auto snapshot = in.client.Snapshot();
  // FAILED_PRECONDITION here is the server's state (no --data-dir), not a write's condition.
  if (!snapshot.ok()) return Fail(kServerError, std::string(snapshot.status().message()));
  if (in.json) {
    std::printf(
        "{\"generation\":%lu,\"keys\":%lu,\"bytes\":%lu,\"unix_ms\":%ld,"
        "\"seconds\":%.3f}\n",
        snapshot->generation(), snapshot->keys(), snapshot->bytes(), snapshot->unix_ms(),
        snapshot->seconds());
    return kOk;
  }
  std::printf("snapshot %lu: %lu keys, %.1f MiB, durable in %.3f s\n", snapshot->generation(),
              snapshot->keys(), snapshot->bytes() / 1048576.0, snapshot->seconds());
  return kOk;
}

int Replicate(Invocation& in) {
  const std::string to = absl::GetFlag(FLAGS_to);
  if (to.empty() == !absl::GetFlag(FLAGS_stop)) {
    return Fail(kUsage, "replicate takes either --to=HOST:PORT or --stop");
  }
  auto changed = in.client.Replicate(to);
  if (!changed.ok()) {
    // FAILED_PRECONDITION here is the server's state, not a write's condition.
    if (changed.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Fail(kServerError, std::string(changed.status().message()));
    }
    return FailStatus(changed.status());
  }
  if (in.json) {
    std::printf("{\"role\":%s,\"primary\":%s}\n", JsonString(changed->role()).c_str(),
                JsonString(changed->primary()).c_str());
    return kOk;
  }
  if (changed->role() == "primary") {
    std::printf("primary: serving writes\n");
  } else {
    std::printf("replica of %s: a full sync follows\n", changed->primary().c_str());
  }
  return kOk;
}

// `ringkv failover [--to=HOST:PORT]`: a planned switchover, sent to the group's primary.
int Failover(Invocation& in) {
  auto moved = in.client.Failover(absl::GetFlag(FLAGS_to));
  if (!moved.ok()) {
    // FAILED_PRECONDITION here is the group's state, not a write's condition.
    if (moved.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Fail(kServerError, std::string(moved.status().message()));
    }
    return FailStatus(moved.status());
  }
  if (in.json) {
    std::printf("{\"primary\":%s,\"term\":%llu,\"writes_paused_ms\":%.1f}\n",
                JsonString(moved->primary()).c_str(),
                static_cast<unsigned long long>(moved->term()), moved->writes_paused_ms());
    return kOk;
  }
  std::printf("primary: %s, term %llu; writes paused %.0f ms\n", moved->primary().c_str(),
              static_cast<unsigned long long>(moved->term()), moved->writes_paused_ms());
  return kOk;
}

// `ringkv cluster status --etcd=... --group=NAME`: the group's members, as each server's
// entry in etcd says (cluster/membership.h), with the seconds their entries have left.
int ClusterStatus(const std::vector<std::string>& operands, bool json, double timeout) {
  if (operands.size() != 1 || operands[0] != "status") {
    return Fail(kUsage, "usage: ringkv cluster status --etcd=HOST:PORT[,...] --group=NAME");
  }
  const std::vector<std::string> endpoints =
      absl::StrSplit(absl::GetFlag(FLAGS_etcd), ',', absl::SkipEmpty());
  const std::string group = absl::GetFlag(FLAGS_group);
  if (endpoints.empty() || group.empty()) {
    return Fail(kUsage, "cluster status needs --etcd=HOST:PORT[,...] and --group=NAME");
  }
  absl::StatusOr<etcd::EtcdClient::Tls> tls = etcd::EtcdClient::LoadTls(
      absl::GetFlag(FLAGS_etcd_ca), absl::GetFlag(FLAGS_etcd_cert), absl::GetFlag(FLAGS_etcd_key));
  if (!tls.ok()) return Fail(kUsage, std::string(tls.status().message()));
  auto client = etcd::EtcdClient::Connect({.endpoints = endpoints,
                                           .timeout = absl::Seconds(timeout == 0 ? 5 : timeout),
                                           .tls = *std::move(tls)});
  if (!client.ok()) return Fail(kServerError, std::string(client.status().message()));
  const std::string prefix = etcd::MemberKey(group, "");
  auto members = (*client)->List(prefix);
  if (!members.ok()) return Fail(kServerError, std::string(members.status().message()));
  auto leader = (*client)->CurrentLeader(etcd::GroupPrefix(group));
  if (!leader.ok()) return Fail(kServerError, std::string(leader.status().message()));
  std::optional<etcd::LeaderValue> who;
  if (leader->has_value()) who = etcd::ParseLeaderValue((*leader)->value);
  // --acks=isr: who holds every acknowledged write (cluster/membership.h).
  auto in_sync_entry = (*client)->Get(etcd::InSyncKey(group));
  if (!in_sync_entry.ok()) return Fail(kServerError, std::string(in_sync_entry.status().message()));
  std::optional<etcd::InSync> in_sync;
  if (in_sync_entry->has_value()) in_sync = etcd::ParseInSync((*in_sync_entry)->value);
  if (json) {
    std::string out = "{\"group\":" + JsonString(group) + ",\"leader\":";
    if (who.has_value()) {
      absl::StrAppend(&out, "{\"term\":", (*leader)->term, ",\"id\":", JsonString(who->server_id),
                      ",\"address\":", JsonString(who->address), "}");
    } else {
      out += "null";
    }
    if (in_sync.has_value()) {
      absl::StrAppend(&out, ",\"in_sync\":{\"term\":", in_sync->term,
                      ",\"leader\":", JsonString(in_sync->leader_id), ",\"members\":[");
      for (size_t i = 0; i < in_sync->members.size(); ++i) {
        absl::StrAppend(&out, i == 0 ? "" : ",", JsonString(in_sync->members[i]));
      }
      out += "]}";
    }
    out += ",\"members\":[";
    for (size_t i = 0; i < members->size(); ++i) {
      const auto& [key, entry] = (*members)[i];
      absl::StrAppend(&out, i == 0 ? "" : ",",
                      "{\"id\":", JsonString(std::string_view(key).substr(prefix.size())),
                      ",\"entry\":", JsonString(entry.value), "}");
    }
    std::printf("%s]}\n", out.c_str());
    return kOk;
  }
  std::printf("group %s: %zu member%s\n", group.c_str(), members->size(),
              members->size() == 1 ? "" : "s");
  if (who.has_value()) {
    std::printf("primary: %s (server %s), term %llu\n", who->address.c_str(),
                who->server_id.c_str(), static_cast<unsigned long long>((*leader)->term));
  } else {
    std::printf("primary: none elected now\n");
  }
  if (in_sync.has_value()) {
    std::printf("in-sync set of term %llu: leader %s, members %s\n",
                static_cast<unsigned long long>(in_sync->term), in_sync->leader_id.c_str(),
                in_sync->members.empty() ? "none" : absl::StrJoin(in_sync->members, ", ").c_str());
  }
  for (const auto& [key, entry] : *members) {
    std::printf("  %s %s\n", key.substr(prefix.size()).c_str(), entry.value.c_str());
  }
  return kOk;
}

// Which of the write flags a command takes.
enum Takes : unsigned {
  kTtl = 1,
  kIfExists = 2,
  kIfVersion = 4,
  kScanFlags = 8,
  kReplicateFlags = 16,
  kTo = 32,  // --to alone.
};

struct Command {
  const char* name;
  const char* usage;
  size_t min_operands;
  size_t max_operands;
  unsigned takes;
  int (*run)(Invocation&);
};

constexpr size_t kMany = ~size_t{0};
constexpr Command kCommands[] = {
    {"get", "get KEY", 1, 1, 0, Get},
    {"put", "put KEY VALUE   (VALUE - reads stdin)", 2, 2, kTtl | kIfExists | kIfVersion, Put},
    {"del", "del KEY", 1, 1, kIfVersion, Del},
    {"ttl", "ttl KEY", 1, 1, 0, Ttl},
    {"expire", "expire KEY DURATION", 2, 2, 0, Expire},
    {"persist", "persist KEY", 1, 1, 0, Persist},
    {"incr", "incr KEY [DELTA]", 1, 2, 0, Incr},
    {"mget", "mget KEY...", 1, kMany, 0, Mget},
    {"mput", "mput KEY=VALUE...", 1, kMany, kTtl | kIfExists, Mput},
    {"scan", "scan [--prefix=P] [--limit=N] [--cursor=C]", 0, 0, kScanFlags, Scan},
    {"stats", "stats", 0, 0, 0, Stats},
    {"snapshot", "snapshot", 0, 0, 0, Snapshot},
    {"replicate", "replicate --to=HOST:PORT | --stop", 0, 0, kReplicateFlags, Replicate},
    {"failover", "failover [--to=HOST:PORT]", 0, 0, kTo, Failover},
};

// The --ttl and --if-* flags as PutOptions; every command-specific flag checked against what
// `command` takes.
int ParseWriteFlags(const Command& command, PutOptions* put) {
  const std::string ttl = absl::GetFlag(FLAGS_ttl);
  const bool if_absent = absl::GetFlag(FLAGS_if_absent);
  const bool if_present = absl::GetFlag(FLAGS_if_present);
  const std::optional<uint64_t> if_version = absl::GetFlag(FLAGS_if_version);
  auto refuse = [&](const char* flag) {
    return Fail(kUsage, absl::StrCat(flag, " does not apply to '", command.name, "'"));
  };
  if (!ttl.empty()) {
    if (!(command.takes & kTtl)) return refuse("--ttl");
    std::string error;
    std::optional<int64_t> ttl_ms = ParseTtl(ttl, &error);
    if (!ttl_ms) return Fail(kUsage, absl::StrCat("--ttl: ", error));
    put->ttl_ms = *ttl_ms;
  }
  if (int(if_absent) + int(if_present) + int(if_version.has_value()) > 1) {
    return Fail(kUsage, "give at most one of --if-absent, --if-present, --if-version");
  }
  if ((if_absent || if_present) && !(command.takes & kIfExists)) {
    return refuse(if_absent ? "--if-absent" : "--if-present");
  }
  if (if_version && !(command.takes & kIfVersion)) return refuse("--if-version");
  if (!(command.takes & (kReplicateFlags | kTo)) && !absl::GetFlag(FLAGS_to).empty()) {
    return refuse("--to");
  }
  if (!(command.takes & kReplicateFlags) && absl::GetFlag(FLAGS_stop)) return refuse("--stop");
  if (!(command.takes & kScanFlags)) {
    if (!absl::GetFlag(FLAGS_prefix).empty()) return refuse("--prefix");
    if (absl::GetFlag(FLAGS_limit) != 0) return refuse("--limit");
    if (absl::GetFlag(FLAGS_cursor) != 0) return refuse("--cursor");
  }
  if (if_absent) put->condition = WriteCondition::Absent();
  if (if_present) put->condition = WriteCondition::Present();
  if (if_version) put->condition = WriteCondition::Version(*if_version);
  return kOk;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the command-line client of ringkv-server.\n"
      "  ringkv [--addr=HOST:PORT[,...] | --etcd=HOST:PORT[,...] --group=NAME] [--json]\n"
      "         [--timeout=SECONDS] COMMAND ARGS...\n"
      "  commands: get KEY | put KEY VALUE (VALUE - reads stdin) | del KEY | ttl KEY |\n"
      "            expire KEY DURATION | persist KEY | incr KEY [DELTA] | mget KEY... |\n"
      "            mput KEY=VALUE... | scan | stats | snapshot |\n"
      "            replicate --to=HOST:PORT | replicate --stop | failover [--to=HOST:PORT] |\n"
      "            cluster status --etcd=HOST:PORT[,...] --group=NAME\n"
      "  put and mput take --ttl=DURATION and --if-absent or --if-present; put and del take\n"
      "  --if-version=N; scan takes --prefix=P, --limit=N and --cursor=C. A DURATION is whole\n"
      "  seconds (30) or has a unit (1500ms, 10s, 1.5h).\n"
      "Exit status: 0 ok, 1 not found, 2 usage error (nothing was sent), 3 server or\n"
      "connection error, 4 the server refused the operation and nothing was written (a\n"
      "condition failed, incr of a non-integer or past 64 bits, a key or value past its\n"
      "limits), 5 refused: no token, an unknown one, or one whose role does not allow the\n"
      "call.\n"
      "With --auth-token-file on the server, give a token: --token-file=FILE or RINGKV_TOKEN.\n"
      "With TLS on the server: --tls-ca=PEM (or --tls for the system's CAs), and for client\n"
      "certificates --tls-cert=PEM --tls-key=PEM.\n"
      "A group's primary is found through etcd (--etcd, --group) or among several --addr;\n"
      "a call that a failover interrupts is sent again as --failover-wait says.");
  std::vector<char*> args = ParseCommandLineOrExit(argc, argv);
  if (args.size() < 2) return Fail(kUsage, "no command given (see --help)");
  const std::string name = args[1];
  const std::vector<std::string> operands(args.begin() + 2, args.end());
  if (name == "cluster") {  // Talks to etcd, not to a server.
    return ClusterStatus(operands, absl::GetFlag(FLAGS_json), absl::GetFlag(FLAGS_timeout));
  }
  const Command* command = nullptr;
  std::string names;
  for (const Command& c : kCommands) {
    if (name == c.name) command = &c;
    absl::StrAppend(&names, " ", c.name);
  }
  if (command == nullptr) {
    return Fail(kUsage, absl::StrCat("unknown command '", name, "'; commands:", names));
  }
  if (operands.size() < command->min_operands || operands.size() > command->max_operands) {
    return Fail(kUsage, absl::StrCat("usage: ringkv ", command->usage));
  }
  double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout >= 0 && timeout <= 86400)) return Fail(kUsage, "--timeout must be 0 .. 86400 s");
  // A snapshot of a large data set takes a while to become durable; a failover waits for a
  // replica to catch up (5 s at most) and for it to take over.
  if (timeout == 0) timeout = command->run == Snapshot ? 600 : command->run == Failover ? 20 : 5;
  absl::StatusOr<ClientCredentials> credentials =
      LoadCredentials({.token_file = absl::GetFlag(FLAGS_token_file),
                       .tls = absl::GetFlag(FLAGS_tls),
                       .tls_ca = absl::GetFlag(FLAGS_tls_ca),
                       .tls_cert = absl::GetFlag(FLAGS_tls_cert),
                       .tls_key = absl::GetFlag(FLAGS_tls_key)});
  if (!credentials.ok()) return Fail(kUsage, std::string(credentials.status().message()));
  credentials->min_replicas = absl::GetFlag(FLAGS_min_replicas);
  credentials->linearizable = absl::GetFlag(FLAGS_linearizable);
  Discovery discovery;
  discovery.etcd = absl::StrSplit(absl::GetFlag(FLAGS_etcd), ',', absl::SkipWhitespace());
  discovery.group = absl::GetFlag(FLAGS_group);
  if (discovery.etcd.empty() != discovery.group.empty()) {
    return Fail(kUsage, "--etcd and --group go together");
  }
  absl::StatusOr<etcd::EtcdClient::Tls> etcd_tls = etcd::EtcdClient::LoadTls(
      absl::GetFlag(FLAGS_etcd_ca), absl::GetFlag(FLAGS_etcd_cert), absl::GetFlag(FLAGS_etcd_key));
  if (!etcd_tls.ok()) return Fail(kUsage, std::string(etcd_tls.status().message()));
  discovery.etcd_tls = *std::move(etcd_tls);
  const double wait = absl::GetFlag(FLAGS_failover_wait);
  if (!(wait >= 0 && wait <= 3600)) return Fail(kUsage, "--failover-wait must be 0 .. 3600 s");
  discovery.patience = absl::Seconds(wait);
  std::string addr = absl::GetFlag(FLAGS_addr);
  if (addr.empty() && discovery.etcd.empty()) addr = "127.0.0.1:50051";
  Client client(addr, absl::Seconds(timeout), *std::move(credentials), std::move(discovery));
  Invocation in{client, operands, absl::GetFlag(FLAGS_json), {}};
  if (int rc = ParseWriteFlags(*command, &in.put); rc != kOk) return rc;
  return command->run(in);
}

}  // namespace
}  // namespace ringkv

// gRPC's threads may still be winding down: base/exit.h says why the exit handlers are skipped.
int main(int argc, char** argv) { ringkv::ExitWithoutTeardown(ringkv::Main(argc, argv)); }
