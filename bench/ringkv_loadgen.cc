// ringkv-loadgen: drives a running ringkv-server over gRPC (the async client API) and reports
// throughput and latency.
//
// Workloads (--mode):
//   unary   one Get or Put per call;
//   multi   MultiGet or MultiPut of --batch keys per call;
//   stream  one Stream per in-flight slot, each round trip a message of --batch operations.
// --concurrency slots are kept busy, spread over --connections channels (each its own TCP
// connection) and --threads client threads, each with its own completion queue. GET or PUT is
// drawn per call from --ratio. Keys are "key:%012d" uniform in [0, --keys), as redis-benchmark's
// key:__rand_int__, and are pre-loaded (MultiPut) before timing. Latency is per call (per
// batch for multi and stream), in a log-linear histogram; no per-operation samples are kept.
//
// --hold makes no calls: it opens --connections connections, says "holding N connections" on
// stdout once all are up, and keeps them open and idle for --duration seconds (or until
// SIGTERM). The connection-scaling runs hold their idle connections in such a second process, so
// the measuring client's own per-channel cost stays out of the figure.
//
// Exit status: 0, 1 if any call failed (by status code in the report), 2 on a usage error,
// 3 if the server cannot be reached.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/latency_histogram.h"
#include "client/client.h"
#include "client/command_line.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "ringkv-server address");
ABSL_FLAG(uint32_t, connections, 1, "TCP connections (gRPC channels)");
ABSL_FLAG(uint32_t, concurrency, 50, "calls in flight in total");
ABSL_FLAG(double, duration, 10, "seconds to run (ignored when --ops is set)");
ABSL_FLAG(uint64_t, ops, 0, "stop after this many operations instead of --duration");
ABSL_FLAG(uint64_t, keys, 1'000'000, "key space, pre-loaded before timing");
ABSL_FLAG(uint32_t, value_size, 32, "value bytes");
ABSL_FLAG(std::string, ratio, "1:0", "GET:PUT mix, e.g. 1:0 (all GET), 0:1 (all PUT), 9:1");
ABSL_FLAG(std::string, mode, "unary", "unary, multi or stream");
ABSL_FLAG(uint32_t, batch, 16, "keys per MultiGet/MultiPut, or operations per stream message");
ABSL_FLAG(uint32_t, threads, 1,
          "client threads, each with a completion queue (1, like redis-benchmark, leaves the "
          "most CPU to a server on the same machine)");
ABSL_FLAG(bool, preload, true, "MultiPut every key before timing (then a GET miss is an error)");
ABSL_FLAG(std::string, json, "", "also write the results as JSON to this file");
ABSL_FLAG(bool, progress, true, "a progress line on stderr every second");
ABSL_FLAG(bool, hold, false,
          "make no calls: open --connections connections and hold them idle for --duration s");

namespace ringkv::bench {
namespace {

namespace pb = ::ringkv::v1;
using Clock = std::chrono::steady_clock;

enum class Mode { kUnary, kMulti, kStream };

struct Config {
  Mode mode;
  uint32_t batch;
  uint64_t keys;
  std::string value;
  double get_fraction;
  bool preload;
};

// Per-thread results, merged at the end.
struct Tally {
  LatencyHistogram latency;
  uint64_t ops = 0;          // Key operations completed (a batch counts its keys).
  // A copy of `ops` for the control thread's progress line: stored by the tally's own thread,
  // read relaxed by the control thread, which only wants a recent figure.
  std::atomic<uint64_t> progress{0};
  uint64_t value_bytes = 0;  // Value bytes moved (sent by PUT, returned by GET).
  std::map<int, uint64_t> errors;  // By gRPC status code (0: a per-item failure).
};

std::string Key(uint64_t i) { return absl::StrFormat("key:%012d", i); }

// One call slot: issues a call, and on completion records it and issues the next, until told
// to stop. Exactly one operation of a slot is outstanding at any time, so `this` is its tag.
class Slot {
 public:
  Slot(pb::KV::Stub* stub, grpc::CompletionQueue* cq, const Config& config, uint64_t seed,
       Tally* tally)
      : stub_(stub), cq_(cq), config_(config), rng_(seed), tally_(tally) {}

  void Start() {
    if (config_.mode == Mode::kStream) {
      context_ = std::make_unique<grpc::ClientContext>();
      stream_ = stub_->PrepareAsyncStream(context_.get(), cq_);
      phase_ = Phase::kStreamStarting;
      stream_->StartCall(this);
      return;
    }
    Issue();
  }

  // A completion; returns false once the slot is finished for good.
  bool OnEvent(bool ok, bool stop) {
    switch (phase_) {
      case Phase::kCall:
        Record(status_.ok() ? CountCallResults() : Fail(status_.error_code()));
        if (stop) return false;
        Issue();
        return true;
      case Phase::kStreamStarting:
        if (!ok) return Broken();
        WriteBatch();
        return true;
      case Phase::kStreamWriting:
        if (!ok) return Broken();
        phase_ = Phase::kStreamReading;
        stream_->Read(&stream_in_, this);
        return true;
      case Phase::kStreamReading:
        if (!ok) return Broken();
        for (const auto& r : stream_in_.results()) {
          if (r.result().code() != 0) ++tally_->errors[r.result().code()];
          tally_->value_bytes += r.result().value().size();
          --awaiting_;
        }
        if (awaiting_ > 0) {
          stream_->Read(&stream_in_, this);
          return true;
        }
        Record(config_.batch);
        if (stop) {
          phase_ = Phase::kStreamClosing;
          stream_->WritesDone(this);
        } else {
          WriteBatch();
        }
        return true;
      case Phase::kStreamClosing:
        phase_ = Phase::kStreamFinishing;
        stream_->Finish(&status_, this);
        return true;
      case Phase::kStreamFinishing:
        if (!status_.ok()) ++tally_->errors[status_.error_code()];
        return false;
    }
    return false;
  }

 private:
  enum class Phase {
    kCall, kStreamStarting, kStreamWriting, kStreamReading, kStreamClosing, kStreamFinishing
  };

  bool NextIsGet() { return std::uniform_real_distribution<>(0, 1)(rng_) < config_.get_fraction; }
  uint64_t NextKey() { return std::uniform_int_distribution<uint64_t>(0, config_.keys - 1)(rng_); }

  void Issue() {
    phase_ = Phase::kCall;
    context_ = std::make_unique<grpc::ClientContext>();
    started_ = Clock::now();
    is_get_ = NextIsGet();
    if (config_.mode == Mode::kUnary) {
      if (is_get_) {
        get_.set_key(Key(NextKey()));
        get_reader_ = stub_->PrepareAsyncGet(context_.get(), get_, cq_);
        get_reader_->StartCall();
        get_reader_->Finish(&get_out_, &status_, this);
      } else {
        put_.set_key(Key(NextKey()));
        put_.set_value(config_.value);
        put_reader_ = stub_->PrepareAsyncPut(context_.get(), put_, cq_);
        put_reader_->StartCall();
        put_reader_->Finish(&put_out_, &status_, this);
      }
      return;
    }
    if (is_get_) {
      mget_.clear_keys();
      for (uint32_t i = 0; i < config_.batch; ++i) mget_.add_keys(Key(NextKey()));
      mget_reader_ = stub_->PrepareAsyncMultiGet(context_.get(), mget_, cq_);
      mget_reader_->StartCall();
      mget_reader_->Finish(&mget_out_, &status_, this);
    } else {
      mput_.clear_items();
      for (uint32_t i = 0; i < config_.batch; ++i) {
        pb::KeyValue* item = mput_.add_items();
        item->set_key(Key(NextKey()));
        item->set_value(config_.value);
      }
      mput_reader_ = stub_->PrepareAsyncMultiPut(context_.get(), mput_, cq_);
      mput_reader_->StartCall();
      mput_reader_->Finish(&mput_out_, &status_, this);
    }
  }

  void WriteBatch() {
    stream_out_.clear_ops();
    for (uint32_t i = 0; i < config_.batch; ++i) {
      pb::StreamOp* op = stream_out_.add_ops();
      op->set_id(next_id_++);
      op->set_key(Key(NextKey()));
      if (NextIsGet()) {
        op->set_type(pb::OP_TYPE_GET);
      } else {
        op->set_type(pb::OP_TYPE_PUT);
        op->set_value(config_.value);
        tally_->value_bytes += config_.value.size();
      }
    }
    awaiting_ = config_.batch;
    started_ = Clock::now();
    phase_ = Phase::kStreamWriting;
    stream_->Write(stream_out_, this);
  }

  // Key operations a finished unary or multi call completed, counting per-item failures.
  uint64_t CountCallResults() {
    if (config_.mode == Mode::kUnary) {
      tally_->value_bytes += is_get_ ? get_out_.value().size() : config_.value.size();
      return 1;
    }
    const auto& results = is_get_ ? mget_out_.results() : mput_out_.results();
    for (const auto& r : results) {
      if (r.code() != 0 && !(r.code() == grpc::StatusCode::NOT_FOUND && !config_.preload)) {
        ++tally_->errors[r.code()];
      }
      tally_->value_bytes += is_get_ ? r.value().size() : config_.value.size();
    }
    return static_cast<uint64_t>(results.size());
  }

  uint64_t Fail(grpc::StatusCode code) {
    if (!(code == grpc::StatusCode::NOT_FOUND && !config_.preload)) ++tally_->errors[code];
    return 0;
  }

  void Record(uint64_t ops) {
    tally_->ops += ops;
    tally_->progress.store(tally_->ops, std::memory_order_relaxed);
    tally_->latency.Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started_).count()));
  }

  bool Broken() {
    ++tally_->errors[grpc::StatusCode::UNAVAILABLE];
    return false;
  }

  pb::KV::Stub* const stub_;
  grpc::CompletionQueue* const cq_;
  const Config& config_;
  std::mt19937_64 rng_;
  Tally* const tally_;

  Phase phase_ = Phase::kCall;
  Clock::time_point started_;
  bool is_get_ = false;
  std::unique_ptr<grpc::ClientContext> context_;
  grpc::Status status_;
  pb::GetRequest get_;
  pb::GetResponse get_out_;
  pb::PutRequest put_;
  pb::PutResponse put_out_;
  pb::MultiGetRequest mget_;
  pb::MultiGetResponse mget_out_;
  pb::MultiPutRequest mput_;
  pb::MultiPutResponse mput_out_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::GetResponse>> get_reader_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::PutResponse>> put_reader_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::MultiGetResponse>> mget_reader_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::MultiPutResponse>> mput_reader_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<pb::StreamRequest, pb::StreamResponse>> stream_;
  pb::StreamRequest stream_out_;
  pb::StreamResponse stream_in_;
  uint64_t next_id_ = 0;
  uint32_t awaiting_ = 0;
};

int Main(int argc, char** argv) {
  // Off for the reason given in server/main.cc: Debian's Abseil checks every gRPC lock for
  // deadlocks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "drives a running ringkv-server and reports ops/s, MB/s and latency percentiles.\n"
      "  ringkv-loadgen [--addr=HOST:PORT] [--mode=unary|multi|stream] [--concurrency=50] "
      "[--ratio=1:0] ...\n"
      "Exit status: 0 ok, 1 some calls failed, 2 usage error, 3 server unreachable.");
  std::vector<char*> rest = ParseCommandLineOrExit(argc, argv);
  if (rest.size() > 1) {
    ExitUsageError(argv[0], absl::StrCat("unexpected argument '", rest[1], "'"));
  }

  Config config;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "unary") {
    config.mode = Mode::kUnary;
  } else if (mode == "multi") {
    config.mode = Mode::kMulti;
  } else if (mode == "stream") {
    config.mode = Mode::kStream;
  } else {
    ExitUsageError(argv[0], "--mode must be unary, multi or stream");
  }
  config.batch = absl::GetFlag(FLAGS_batch);
  config.keys = absl::GetFlag(FLAGS_keys);
  config.value.assign(absl::GetFlag(FLAGS_value_size), 'v');
  config.preload = absl::GetFlag(FLAGS_preload);
  std::vector<std::string> ratio = absl::StrSplit(absl::GetFlag(FLAGS_ratio), ':');
  double gets = 0;
  double puts = 0;
  if (ratio.size() != 2 || !absl::SimpleAtod(ratio[0], &gets) ||
      !absl::SimpleAtod(ratio[1], &puts) || gets < 0 || puts < 0 || gets + puts <= 0) {
    ExitUsageError(argv[0], "--ratio must be GET:PUT, e.g. 1:0 or 9:1");
  }
  config.get_fraction = gets / (gets + puts);
  const uint32_t connections = absl::GetFlag(FLAGS_connections);
  const uint32_t concurrency = absl::GetFlag(FLAGS_concurrency);
  const uint32_t threads = std::min(absl::GetFlag(FLAGS_threads), concurrency);
  if (connections == 0 || concurrency == 0 || threads == 0 || config.batch == 0 ||
      config.keys == 0) {
    ExitUsageError(argv[0],
                   "--connections, --concurrency, --threads, --batch and --keys must be >= 1");
  }
  if (connections > 100'000) ExitUsageError(argv[0], "--connections must be at most 100000");
  const std::string addr = absl::GetFlag(FLAGS_addr);

  // Channels, each its own connection: a local subchannel pool keeps gRPC from sharing one.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<pb::KV::Stub>> stubs;
  for (uint32_t i = 0; i < connections; ++i) {
    grpc::ChannelArguments args = Client::ChannelArgs();
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("ringkv.channel", static_cast<int>(i));  // Distinct args: distinct channels.
    channels.push_back(grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(pb::KV::NewStub(channels.back()));
  }
  for (auto& channel : channels) {
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      std::fprintf(stderr, "ringkv-loadgen: cannot reach ringkv-server at %s\n", addr.c_str());
      return 3;
    }
  }

  if (absl::GetFlag(FLAGS_hold)) {
    std::printf("holding %u connections\n", connections);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_duration)));
    return 0;
  }

  if (config.preload) {
    Client client(addr, absl::Seconds(60));
    // Batches of up to 1,000 keys and about 1 MiB, well under the server's message limit.
    const size_t per_batch =
        std::clamp<size_t>((size_t{1} << 20) / (config.value.size() + 32), 1, 1000);
    std::vector<std::pair<std::string, std::string>> items;
    for (uint64_t k = 0; k < config.keys; ++k) {
      items.emplace_back(Key(k), config.value);
      if (items.size() == per_batch || k + 1 == config.keys) {
        auto result = client.MultiPut(items);
        if (!result.ok()) {
          std::fprintf(stderr, "ringkv-loadgen: pre-load failed: %s\n",
                       std::string(result.status().message()).c_str());
          return 3;
        }
        items.clear();
      }
    }
  }

  const uint64_t max_ops = absl::GetFlag(FLAGS_ops);
  const double duration = absl::GetFlag(FLAGS_duration);
  std::atomic<bool> stop{false};
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> workers;
  const auto t0 = Clock::now();
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      grpc::CompletionQueue cq;
      std::vector<std::unique_ptr<Slot>> slots;
      for (uint32_t s = t; s < concurrency; s += threads) {
        slots.push_back(std::make_unique<Slot>(stubs[s % connections].get(), &cq, config,
                                               s * 7919 + 1, &tallies[t]));
      }
      for (auto& slot : slots) slot->Start();
      size_t live = slots.size();
      void* tag;
      bool ok;
      while (live > 0 && cq.Next(&tag, &ok)) {
        if (!static_cast<Slot*>(tag)->OnEvent(ok, stop.load(std::memory_order_relaxed))) --live;
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    });
  }
  // The control thread: stops the run at --duration or --ops, and reports progress.
  auto total_ops = [&] {
    uint64_t n = 0;
    for (const Tally& tally : tallies) n += tally.progress.load(std::memory_order_relaxed);
    return n;
  };
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if ((max_ops > 0 && total_ops() >= max_ops) || (max_ops == 0 && elapsed >= duration)) break;
    if (absl::GetFlag(FLAGS_progress) && static_cast<int>(elapsed * 10) % 10 == 0) {
      std::fprintf(stderr, "\r%.0f s: %llu ops", elapsed,
                   static_cast<unsigned long long>(total_ops()));
    }
  }
  stop.store(true, std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& w : workers) w.join();
  if (absl::GetFlag(FLAGS_progress)) std::fprintf(stderr, "\n");

  Tally all;
  for (const Tally& tally : tallies) {
    all.latency.Merge(tally.latency);
    all.ops += tally.ops;
    all.value_bytes += tally.value_bytes;
    for (const auto& [code, n] : tally.errors) all.errors[code] += n;
  }
  uint64_t error_count = 0;
  std::string errors;
  for (const auto& [code, n] : all.errors) {
    error_count += n;
    absl::StrAppend(&errors, errors.empty() ? "" : ", ", "code ", code, ": ", n);
  }
  const double ops_per_s = static_cast<double>(all.ops) / seconds;
  const double mb_per_s = static_cast<double>(all.value_bytes) / seconds / 1e6;
  auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  std::printf(
      "mode %s, batch %u, %u in flight over %u connection(s), GET:PUT %s, %u-byte values, %llu "
      "keys, %.1f s\n",
      mode.c_str(), config.mode == Mode::kUnary ? 1 : config.batch, concurrency, connections,
      absl::GetFlag(FLAGS_ratio).c_str(), absl::GetFlag(FLAGS_value_size),
      static_cast<unsigned long long>(config.keys), seconds);
  std::printf("ops/s %.0f, MB/s %.2f, latency per call p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, "
              "max %.3f ms, errors %llu%s%s%s\n",
              ops_per_s, mb_per_s, ms(all.latency.Percentile(50)),
              ms(all.latency.Percentile(99)), ms(all.latency.Percentile(99.9)),
              ms(all.latency.max()), static_cast<unsigned long long>(error_count),
              errors.empty() ? "" : " (", errors.c_str(), errors.empty() ? "" : ")");
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << absl::StrFormat(
        "{\"mode\":\"%s\",\"batch\":%u,\"concurrency\":%u,\"connections\":%u,\"ratio\":\"%s\","
        "\"value_size\":%u,\"keys\":%d,\"seconds\":%.3f,\"ops\":%d,\"ops_per_s\":%.1f,"
        "\"mb_per_s\":%.3f,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"p999_ms\":%.4f,\"max_ms\":%.4f,"
        "\"errors\":%d}\n",
        mode, config.batch, concurrency, connections, absl::GetFlag(FLAGS_ratio),
        absl::GetFlag(FLAGS_value_size), config.keys, seconds, all.ops, ops_per_s, mb_per_s,
        ms(all.latency.Percentile(50)), ms(all.latency.Percentile(99)),
        ms(all.latency.Percentile(99.9)), ms(all.latency.max()), error_count);
  }
  return error_count == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ringkv::bench

int main(int argc, char** argv) { return ringkv::bench::Main(argc, argv); }
