// ringkv: the command-line client of ringkv-server.
//
//   ringkv [--addr=HOST:PORT] [--json] [--timeout=SECONDS] COMMAND ARGS...
//     get KEY              print the value (raw bytes)
//     put KEY VALUE        store VALUE; VALUE "-" reads it from stdin (binary-safe)
//     del KEY              remove the key
//     mget KEY...          one line per key: KEY<TAB>VALUE, or KEY<TAB>(not found)
//     mput KEY=VALUE...    store several; one line per item
//     stats                per-shard counters, memory, uptime
//
// Exit status: 0 ok, 1 not found (any key, for mget), 2 usage error (or input the server
// refused as invalid), 3 server or connection error. Errors are one line on stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"
#include "client/command_line.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "ringkv-server address, HOST:PORT");
ABSL_FLAG(bool, json, false, "machine-readable output: one JSON document on stdout");
ABSL_FLAG(double, timeout, 5.0, "seconds to wait for the server before giving up");

namespace ringkv {
namespace {

constexpr int kOk = 0;
constexpr int kNotFound = 1;
constexpr int kUsage = 2;
constexpr int kServerError = 3;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "ringkv: %s\n", message.c_str());
  return code;
}

int FailStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      return Fail(kNotFound, std::string(status.message()));
    case absl::StatusCode::kInvalidArgument:
      return Fail(kUsage, std::string(status.message()));
    default:
      return Fail(kServerError, std::string(status.message()));
  }
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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the command-line client of ringkv-server.\n"
      "  ringkv [--addr=HOST:PORT] [--json] [--timeout=SECONDS] COMMAND ARGS...\n"
      "  commands: get KEY | put KEY VALUE (VALUE - reads stdin) | del KEY | mget KEY... |\n"
      "            mput KEY=VALUE... | stats\n"
      "Exit status: 0 ok, 1 not found, 2 usage error, 3 server or connection error.");
  std::vector<char*> args = ParseCommandLineOrExit(argc, argv);
  if (args.size() < 2) return Fail(kUsage, "no command given (see --help)");
  const std::string command = args[1];
  const std::vector<std::string> operands(args.begin() + 2, args.end());
  const bool json = absl::GetFlag(FLAGS_json);
  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout > 0 && timeout <= 86400)) return Fail(kUsage, "--timeout must be 0 .. 86400 s");
  Client client(absl::GetFlag(FLAGS_addr), absl::Seconds(timeout));

  auto want = [&](size_t n, const char* usage) {
    return operands.size() == n ? std::string() : absl::StrCat("usage: ringkv ", usage);
  };
  if (command == "get") {
    if (auto u = want(1, "get KEY"); !u.empty()) return Fail(kUsage, u);
    absl::StatusOr<std::string> value = client.Get(operands[0]);
    if (!value.ok()) {
      if (value.status().code() == absl::StatusCode::kNotFound) {
        return Fail(kNotFound, absl::StrCat("key not found: ", operands[0]));
      }
      return FailStatus(value.status());
    }
    if (json) {
      std::printf("{\"key\":%s,\"value\":%s}\n", JsonString(operands[0]).c_str(),
                  JsonString(*value).c_str());
    } else {
      PrintRaw(*value);
    }
    return kOk;
  }
  if (command == "put") {
    if (auto u = want(2, "put KEY VALUE   (VALUE - reads stdin)"); !u.empty()) {
      return Fail(kUsage, u);
    }
    std::string value = operands[1];
    if (value == "-") {
      std::cin >> std::noskipws;
      value.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    if (absl::Status s = client.Put(operands[0], value); !s.ok()) return FailStatus(s);
    if (json) {
      std::printf("{\"ok\":true}\n");
    } else {
      std::printf("OK\n");
    }
    return kOk;
  }
  if (command == "del") {
    if (auto u = want(1, "del KEY"); !u.empty()) return Fail(kUsage, u);
    if (absl::Status s = client.Delete(operands[0]); !s.ok()) {
      if (s.code() == absl::StatusCode::kNotFound) {
        return Fail(kNotFound, absl::StrCat("key not found: ", operands[0]));
      }
      return FailStatus(s);
    }
    std::printf(json ? "{\"ok\":true}\n" : "OK\n");
    return kOk;
  }
  if (command == "mget") {
    if (operands.empty()) return Fail(kUsage, "usage: ringkv mget KEY...");
    auto items = client.MultiGet(operands);
    if (!items.ok()) return FailStatus(items.status());
    int rc = kOk;
    std::string out = json ? "[" : "";
    for (size_t i = 0; i < items->size(); ++i) {
      const Client::Item& item = (*items)[i];
      if (item.status.code() == absl::StatusCode::kNotFound) rc = std::max(rc, kNotFound);
      if (!item.status.ok() && item.status.code() != absl::StatusCode::kNotFound) rc = kUsage;
      if (json) {
        absl::StrAppend(&out, i ? "," : "", "{\"key\":", JsonString(operands[i]),
                        item.status.ok() ? ",\"value\":" + JsonString(item.value)
                                         : ",\"error\":" +
                                               JsonString(std::string(item.status.message())),
                        "}");
      } else {
        absl::StrAppend(&out, operands[i], "\t",
                        item.status.ok() ? item.value
                        : item.status.code() == absl::StatusCode::kNotFound
                            ? std::string("(not found)")
                            : absl::StrCat("(error: ", item.status.message(), ")"),
                        "\n");
      }
    }
    if (json) out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return rc;
  }
  if (command == "mput") {
    if (operands.empty()) return Fail(kUsage, "usage: ringkv mput KEY=VALUE...");
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const std::string& operand : operands) {
      const size_t eq = operand.find('=');
      if (eq == std::string::npos) {
        return Fail(kUsage, absl::StrCat("mput: '", operand, "' is not KEY=VALUE"));
      }
      pairs.emplace_back(operand.substr(0, eq), operand.substr(eq + 1));
    }
    auto items = client.MultiPut(pairs);
    if (!items.ok()) return FailStatus(items.status());
    int rc = kOk;
    std::string out = json ? "[" : "";
    for (size_t i = 0; i < items->size(); ++i) {
      const absl::Status& s = (*items)[i].status;
      if (!s.ok()) rc = kUsage;
      if (json) {
        absl::StrAppend(&out, i ? "," : "", "{\"key\":", JsonString(pairs[i].first),
                        s.ok() ? ",\"ok\":true"
                               : ",\"error\":" + JsonString(std::string(s.message())),
                        "}");
      } else {
        absl::StrAppend(&out, pairs[i].first, "\t",
                        s.ok() ? std::string("OK") : absl::StrCat("(error: ", s.message(), ")"),
                        "\n");
      }
    }
    if (json) out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return rc;
  }
  if (command == "stats") {
    if (auto u = want(0, "stats"); !u.empty()) return Fail(kUsage, u);
    auto stats = client.Stats();
    if (!stats.ok()) return FailStatus(stats.status());
    if (json) {
      std::string out;
      google::protobuf::util::JsonPrintOptions options;
      options.always_print_primitive_fields = true;
      options.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(*stats, &out, options);
      std::printf("%s\n", out.c_str());
      return kOk;
    }
    std::printf("engine %s%s, uptime %.1f s, memory %.1f MiB allocated, %.1f MiB resident\n",
                stats->engine().c_str(),
                stats->ring().empty() ? "" : (" (" + stats->ring() + " rings)").c_str(),
                stats->uptime_seconds(), stats->memory_allocated_bytes() / 1048576.0,
                stats->memory_resident_bytes() / 1048576.0);
    std::printf("%-6s %12s %14s %14s %12s %12s %10s\n", "shard", "keys", "payload_bytes", "ops",
                "ring_sent", "ring_recv", "full_waits");
    for (const auto& s : stats->shards()) {
      std::printf("%-6u %12lu %14lu %14lu %12lu %12lu %10lu\n", s.shard(), s.keys(),
                  s.payload_bytes(), s.ops(), s.ring_sent(), s.ring_received(),
                  s.ring_full_waits());
    }
    std::printf("in rings now: %lu\n", stats->ring_in_flight());
    return kOk;
  }
  return Fail(kUsage, absl::StrCat("unknown command '", command,
                                   "'; commands: get put del mget mput stats"));
}

}  // namespace
}  // namespace ringkv

int main(int argc, char** argv) { return ringkv::Main(argc, argv); }
