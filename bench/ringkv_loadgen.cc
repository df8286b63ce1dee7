// ringkv-loadgen: drives a running ringkv-server and reports throughput, latency and its own
// CPU per operation.
//
// Workloads (--mode):
//   unary   one Get or Put per call;
//   multi   MultiGet or MultiPut of --batch keys per call;
//   stream  one Stream per in-flight slot, each round trip a message of --batch operations.
// --concurrency slots are kept busy, spread over --connections TCP connections and --threads
// client threads. GET or PUT is drawn per call from --ratio. Keys are "key:%012d" uniform in
// [0, --keys), as redis-benchmark's key:__rand_int__, and are pre-loaded (MultiPut) before
// timing unless --preload=false; then a GET may miss, and the report gives the GETs' hit rate
// (of a cache under --max-memory, or of keys with --ttl_ms). Latency is per call (per batch for
// multi and stream), in a log-linear histogram; no per-operation samples are kept. With the h2
// client a call is timed from the moment its round of requests goes to the sockets to the moment
// its answer is read, as redis-benchmark times a request from its write; the grpc client times from
// the call's start.
//
// Clients (--client):
//   h2    gRPC on ringkv's own HTTP/2 (net/h2_channel.h), each thread an epoll loop over its
//         own connections: under a microsecond of CPU per call with calls in flight, so that on a
//         machine shared with the server the generator costs little more than redis-benchmark
//         does per request;
//   grpc  grpc++'s async client, a completion queue per thread: the reference client, at
//         several times the CPU per call.
// The report gives the generator's own CPU (user + system, getrusage) per operation, so that a
// run can show the client was not the bottleneck.
//
// In a group (--etcd, --group) the run goes to the primary the group's leader key names, and
// follows it: when calls fail or every connection broke, it asks the group again, and if the
// primary moved (a failover, a switchover) it connects there and goes on. The report lists each
// move, and how long the run made no calls meanwhile; the calls the move cut are errors.
//
// --hold makes no calls: it opens --connections connections, says "holding N connections" on
// stdout once all are up, and keeps them open and idle for --duration seconds (or until
// SIGTERM). The connection-scaling runs hold their idle connections in such a second process, so
// the measuring client's own per-connection cost stays out of the figure.
//
// Exit status: 0, 1 if any call failed (by status code in the report), 2 on a usage error,
// 3 if the server cannot be reached.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <sys/epoll.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/command_line.h"
#include "base/exit.h"
#include "bench/latency_histogram.h"
#include "client/client.h"
#include "net/h2_channel.h"

ABSL_FLAG(std::string, addr, "127.0.0.1:50051", "ringkv-server address");
ABSL_FLAG(std::string, etcd, "",
          "with --group: the etcd endpoints (HOST:PORT[,...]) of a group; the run goes to the "
          "primary its leader key names (instead of --addr), and follows it when it moves: once "
          "calls fail, the run asks again, and goes on on the new primary (the report says when)");
ABSL_FLAG(std::string, group, "", "with --etcd: the group's name (the servers' --group)");
ABSL_FLAG(std::string, etcd_ca, "", "with --etcd: TLS to etcd, trusting the CAs in this PEM file");
ABSL_FLAG(std::string, etcd_cert, "", "with --etcd: the PEM client certificate etcd asks for");
ABSL_FLAG(std::string, etcd_key, "", "the PEM private key of --etcd-cert");
ABSL_FLAG(std::string, client, "h2",
          "h2 (gRPC on ringkv's own HTTP/2: the least client CPU per call) or grpc (grpc++'s async "
          "client)");
ABSL_FLAG(uint32_t, connections, 1, "TCP connections");
ABSL_FLAG(uint32_t, concurrency, 50, "calls in flight in total");
ABSL_FLAG(double, duration, 10, "seconds to run (ignored when --ops is set)");
ABSL_FLAG(uint64_t, ops, 0,
          "stop after this many operations, failed ones included, instead of --duration");
ABSL_FLAG(uint64_t, keys, 1'000'000, "key space, pre-loaded before timing");
ABSL_FLAG(uint32_t, value_size, 32, "value bytes");
ABSL_FLAG(uint64_t, seed, 0,
          "varies the key sequence: each call slot draws its keys from its own generator, seeded "
          "from its index and this, so runs with the same seed send the same keys in the same "
          "order");
ABSL_FLAG(std::string, ratio, "1:0", "GET:PUT mix, e.g. 1:0 (all GET), 0:1 (all PUT), 9:1");
ABSL_FLAG(std::string, mode, "unary", "unary, multi or stream");
ABSL_FLAG(uint32_t, batch, 16, "keys per MultiGet/MultiPut, or operations per stream message");
ABSL_FLAG(uint32_t, threads, 1,
          "client threads (1, like redis-benchmark, leaves the most CPU to a server on the same "
          "machine); with --client=h2 each thread takes a share of the connections");
ABSL_FLAG(bool, preload, true, "MultiPut every key before timing (then a GET miss is an error)");
ABSL_FLAG(int64_t, ttl_ms, 0,
          "every PUT gives its key this TTL in milliseconds (0: none); needs --preload=false");
ABSL_FLAG(std::string, json, "", "also write the results as JSON to this file");
ABSL_FLAG(bool, progress, true, "a progress line on stderr every second");
ABSL_FLAG(std::string, token_file, "",
          "send the bearer token in this file with every call (default: $RINGKV_TOKEN, if set)");
ABSL_FLAG(bool, tls, false, "connect with TLS, trusting the system's CAs");
ABSL_FLAG(std::string, tls_ca, "", "connect with TLS, trusting the CAs in this PEM file");
ABSL_FLAG(std::string, tls_cert, "", "present this PEM client certificate (mTLS)");
ABSL_FLAG(std::string, tls_key, "", "the PEM private key of --tls-cert");
ABSL_FLAG(std::string, consistency, "",
          "send ringkv-consistency with every call: linearizable (its GETs are answered only "
          "by the group's primary, after the writes they may see are acknowledged) or "
          "serializable; default: none (serializable)");
ABSL_FLAG(std::string, min_replicas, "",
          "send ringkv-min-replicas=N with every call: its PUTs wait until N replicas applied "
          "them; default: none (the server's --min-replicas)");
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
  int64_t ttl_ms;             // Every PUT's TTL; 0: none.
  uint64_t seed;              // --seed.
  std::string authorization;  // "Bearer TOKEN" (--token-file), or empty.
  std::string consistency;    // --consistency, or empty.
  std::string min_replicas;   // --min_replicas, or empty.
  // In a group (--etcd): a unary or batch call has kFollowDeadline, and one that fails for
  // want of its server (UNAVAILABLE, DEADLINE_EXCEEDED) ends its slot, so that once every slot
  // has ended the run can find the primary again (RunLoad).
  bool follow = false;
};

constexpr auto kFollowDeadline = std::chrono::seconds(2);

// The key generator's seed of call slot `s`.
uint64_t SlotSeed(const Config& config, uint32_t s) {
  return s * 7919 + 1 + config.seed * 1'000'003;
}

// Per-thread results, merged at the end.
struct Tally {
  LatencyHistogram latency;
  uint64_t ops = 0;     // Key operations completed (a batch counts its keys).
  uint64_t failed = 0;  // Failures (calls, or a batch's items).
  // `ops` + `failed`, for the control thread's progress line and --ops: stored by the tally's
  // own thread, read relaxed by the control thread, which only wants a recent figure.
  std::atomic<uint64_t> progress{0};
  uint64_t value_bytes = 0;  // Value bytes moved (sent by PUT, returned by GET).
  uint64_t gets = 0;         // GET key operations answered, and those that found their key.
  uint64_t get_hits = 0;
  std::map<int, uint64_t> errors;  // By gRPC status code (0: a per-item failure).
};

// "key:%012d", written in place: a formatter cost ~1,000 instructions a key, more than the rest
// of a batched call's client work. `i` < 10^12 (--keys is checked).
constexpr uint64_t kMaxKeys = 1'000'000'000'000;
void WriteKey(uint64_t i, std::string* out) {
  out->resize(16);
  char* p = out->data();
  std::memcpy(p, "key:", 4);
  for (int d = 15; d >= 4; --d) {
    p[d] = static_cast<char>('0' + i % 10);
    i /= 10;
  }
}
std::string Key(uint64_t i) {
  std::string key;
  WriteKey(i, &key);
  return key;
}

// What every slot does whichever client carries its calls: draws the next operation, fills in
// its request, and accounts for its outcome. One per slot; the slot's thread only.
class Workload {
 public:
  Workload(const Config& config, uint64_t seed, Tally* tally)
      : config_(config), rng_(seed), tally_(tally), stream_gets_(config.batch) {}

  const Config& config() const { return config_; }

  // Unary and multi: draws GET or PUT and fills the matching request; true for GET.
  bool FillCall(pb::GetRequest* get, pb::PutRequest* put, pb::MultiGetRequest* mget,
                pb::MultiPutRequest* mput) {
    is_get_ = NextIsGet();
    started_ = Clock::now();
    if (config_.mode == Mode::kUnary) {
      if (is_get_) {
        WriteKey(NextKey(), get->mutable_key());
      } else {
        WriteKey(NextKey(), put->mutable_key());
        // The value is the same every call, and only set here: copied once, not per call (an
        // 80 KB copy per PUT was a tenth of this client's samples there).
        if (put->value().size() != config_.value.size()) put->set_value(config_.value);
        put->set_ttl_ms(config_.ttl_ms);
      }
      return is_get_;
    }
    // Cleared repeated fields keep their elements, so keys and values reuse their memory.
    if (is_get_) {
      mget->clear_keys();
      for (uint32_t i = 0; i < config_.batch; ++i) WriteKey(NextKey(), mget->add_keys());
    } else {
      mput->clear_items();
      for (uint32_t i = 0; i < config_.batch; ++i) {
        pb::KeyValue* item = mput->add_items();
        WriteKey(NextKey(), item->mutable_key());
        item->set_value(config_.value);
        item->set_ttl_ms(config_.ttl_ms);
      }
    }
    return is_get_;
  }

  // Stream: the next message of --batch operations.
  void FillStream(pb::StreamRequest* out) {
    out->clear_ops();
    for (uint32_t i = 0; i < config_.batch; ++i) {
      pb::StreamOp* op = out->add_ops();
      op->set_id(next_id_++);
      WriteKey(NextKey(), op->mutable_key());
      stream_gets_[i] = NextIsGet();
      if (stream_gets_[i]) {
        op->set_type(pb::OP_TYPE_GET);
      } else {
        op->set_type(pb::OP_TYPE_PUT);
        op->set_value(config_.value);
        op->set_ttl_ms(config_.ttl_ms);
        tally_->value_bytes += config_.value.size();
      }
    }
    awaiting_ = config_.batch;
    started_ = Clock::now();
  }

  // A stream reply; true once every operation of the batch is answered (and recorded).
  bool TakeStreamReply(const pb::StreamResponse& reply) {
    for (const auto& r : reply.results()) {
      TakeStreamResult(r.id(), r.result().code(), r.result().value().size());
    }
    return StreamBatchDone();
  }
  // The same from the reply's bytes, with no message object: protobuf's parse of a
  // StreamResponse makes and frees an ItemResult per result (Clear deletes a proto3 message
  // field), 6% of this client's samples at Stream GET of 16. False if they do not parse.
  bool TakeStreamReply(std::string_view bytes, bool* done) {
    using google::protobuf::internal::WireFormatLite;
    using google::protobuf::io::CodedInputStream;
    CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                        static_cast<int>(bytes.size()));
    while (const uint32_t tag = in.ReadTag()) {
      if (tag != (pb::StreamResponse::kResultsFieldNumber << 3 | 2)) {
        if (!WireFormatLite::SkipField(&in, tag)) return false;
        continue;
      }
      uint64_t id = 0;
      uint64_t code = 0;
      uint32_t value_bytes = 0;
      int length;
      if (!ReadLength(in, &length)) return false;
      const auto result_limit = in.PushLimit(length);
      while (const uint32_t result_tag = in.ReadTag()) {
        if (result_tag == (pb::StreamResult::kIdFieldNumber << 3)) {
          if (!in.ReadVarint64(&id)) return false;
        } else if (result_tag == (pb::StreamResult::kResultFieldNumber << 3 | 2)) {
          if (!ReadLength(in, &length)) return false;
          const auto item_limit = in.PushLimit(length);
          while (const uint32_t item_tag = in.ReadTag()) {
            bool ok;
            if (item_tag == (pb::ItemResult::kCodeFieldNumber << 3)) {
              ok = in.ReadVarint64(&code);
            } else if (item_tag == (pb::ItemResult::kValueFieldNumber << 3 | 2)) {
              ok = in.ReadVarint32(&value_bytes) && in.Skip(static_cast<int>(value_bytes));
            } else {
              ok = WireFormatLite::SkipField(&in, item_tag);
            }
            if (!ok) return false;
          }
          if (!in.ConsumedEntireMessage()) return false;
          in.PopLimit(item_limit);
        } else if (!WireFormatLite::SkipField(&in, result_tag)) {
          return false;
        }
      }
      if (!in.ConsumedEntireMessage()) return false;
      in.PopLimit(result_limit);
      TakeStreamResult(id, static_cast<int>(code), value_bytes);
    }
    if (!in.ConsumedEntireMessage() || in.CurrentPosition() != static_cast<int>(bytes.size())) {
      return false;
    }
    *done = StreamBatchDone();
    return true;
  }

  // The value's length in a GetResponse's bytes, read with no message object: protobuf's
  // parse copies the value out (7% of this client's samples at GET of 80 KB), where only its
  // length counts here. False if the bytes do not parse.
  static bool ReadGetValueBytes(std::string_view bytes, size_t* value_bytes) {
    using google::protobuf::internal::WireFormatLite;
    using google::protobuf::io::CodedInputStream;
    CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                        static_cast<int>(bytes.size()));
    *value_bytes = 0;  // As protobuf has it: the last value field counts.
    while (const uint32_t tag = in.ReadTag()) {
      if (tag != (pb::GetResponse::kValueFieldNumber << 3 | 2)) {
        if (!WireFormatLite::SkipField(&in, tag)) return false;
        continue;
      }
      int length;
      if (!ReadLength(in, &length) || !in.Skip(length)) return false;
      *value_bytes = static_cast<size_t>(length);
    }
    return in.ConsumedEntireMessage() && in.CurrentPosition() == static_cast<int>(bytes.size());
  }

  // A finished unary or multi call: OK with its response, or its status code.
  void TakeUnary(size_t get_value_bytes) {
    if (is_get_) CountGet(0);
    tally_->value_bytes += is_get_ ? get_value_bytes : config_.value.size();
    Record(1);
  }
  template <typename Results>
  void TakeBatch(const Results& results) {
    for (const auto& r : results) {
      if (is_get_) CountGet(r.code());
      if (r.code() != 0 && !IsMiss(r.code())) Fail(r.code());
      tally_->value_bytes += is_get_ ? r.value().size() : config_.value.size();
    }
    Record(static_cast<uint64_t>(results.size()));
  }
  // A GET that missed was answered: it counts as an operation (in ops/s and latency), as a
  // hit does; any other failure counts as an error only.
  void TakeFailure(int code) {
    if (is_get_) CountGet(code);
    if (IsMiss(code)) {
      Record(1);
    } else {
      Fail(code);
      Record(0);
    }
  }
  // A stream or connection that broke: one error, nothing recorded.
  void Broken(int code) { Fail(code); }
  // Whether a call that ended with `code` ends its slot (Config::follow).
  bool Ends(int code) const {
    return config_.follow &&
           (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED);
  }

  // Restarts the latency clock of the call just filled: the h2 client sends its calls at the
  // end of an event-loop round, and times them from there, as redis-benchmark times a request
  // from its write.
  void Stamp(Clock::time_point sent) { started_ = sent; }

 private:
  // A submessage's length, refused if it runs past its parent's (PushLimit would cut it short
  // and the parse would go on as if the submessage had ended there).
  static bool ReadLength(google::protobuf::io::CodedInputStream& in, int* length) {
    return in.ReadVarintSizeAsInt(length) && *length <= in.BytesUntilLimit();
  }
  void TakeStreamResult(uint64_t id, int code, size_t value_bytes) {
    const uint64_t index = id - (next_id_ - config_.batch);
    if (index < stream_gets_.size() && stream_gets_[index]) CountGet(code);
    if (code != 0 && !IsMiss(code)) Fail(code);
    tally_->value_bytes += value_bytes;
    --awaiting_;
  }
  bool StreamBatchDone() {
    if (awaiting_ > 0) return false;
    Record(config_.batch);
    return true;
  }

  // Without --preload, a GET may miss (and a write may be evicted or expire): not an error.
  bool IsMiss(int code) const { return code == grpc::StatusCode::NOT_FOUND && !config_.preload; }
  void Fail(int code) {
    ++tally_->errors[code];
    ++tally_->failed;
    tally_->progress.store(tally_->ops + tally_->failed, std::memory_order_relaxed);
  }
  void CountGet(int code) {
    ++tally_->gets;
    if (code == 0) ++tally_->get_hits;
  }
  bool NextIsGet() { return std::uniform_real_distribution<>(0, 1)(rng_) < config_.get_fraction; }
  uint64_t NextKey() { return std::uniform_int_distribution<uint64_t>(0, config_.keys - 1)(rng_); }

  void Record(uint64_t ops) {
    tally_->ops += ops;
    tally_->progress.store(tally_->ops + tally_->failed, std::memory_order_relaxed);
    tally_->latency.Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started_).count()));
  }

  const Config& config_;
  std::mt19937_64 rng_;
  Tally* const tally_;
  Clock::time_point started_;
  bool is_get_ = false;
  uint64_t next_id_ = 0;
  uint32_t awaiting_ = 0;
  std::vector<bool> stream_gets_;  // Stream: which operations of the batch in flight are GETs.
};

// A call slot on grpc++'s async client: issues a call, and on completion records it and issues
// the next, until told to stop. Exactly one operation of a slot is outstanding at any time, so
// `this` is its tag.
class GrpcSlot {
 public:
  GrpcSlot(pb::KV::Stub* stub, grpc::CompletionQueue* cq, const Config& config, uint64_t seed,
           Tally* tally)
      : stub_(stub), cq_(cq), work_(config, seed, tally) {}

  void Start() {
    if (work_.config().mode == Mode::kStream) {
      context_ = NewContext(false);
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
        if (!status_.ok()) {
          work_.TakeFailure(status_.error_code());
        } else if (work_.config().mode == Mode::kUnary) {
          work_.TakeUnary(get_out_.value().size());
        } else if (is_get_) {
          work_.TakeBatch(mget_out_.results());
        } else {
          work_.TakeBatch(mput_out_.results());
        }
        if (stop || (!status_.ok() && work_.Ends(status_.error_code()))) return false;
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
        if (!work_.TakeStreamReply(stream_in_)) {
          stream_->Read(&stream_in_, this);
          return true;
        }
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
        if (!status_.ok()) work_.Broken(status_.error_code());
        return false;
    }
    return false;
  }

 private:
  enum class Phase {
    kCall,
    kStreamStarting,
    kStreamWriting,
    kStreamReading,
    kStreamClosing,
    kStreamFinishing
  };

  // `call`: a unary or batch call, which has a deadline when the run follows a group.
  std::unique_ptr<grpc::ClientContext> NewContext(bool call) const {
    auto context = std::make_unique<grpc::ClientContext>();
    const std::string& authorization = work_.config().authorization;
    if (!authorization.empty()) context->AddMetadata("authorization", authorization);
    const Config& config = work_.config();
    if (!config.consistency.empty()) context->AddMetadata("ringkv-consistency", config.consistency);
    if (!config.min_replicas.empty()) {
      context->AddMetadata("ringkv-min-replicas", config.min_replicas);
    }
    if (call && work_.config().follow) {
      context->set_deadline(std::chrono::system_clock::now() + kFollowDeadline);
    }
    return context;
  }

  void Issue() {
    phase_ = Phase::kCall;
    context_ = NewContext(true);
    is_get_ = work_.FillCall(&get_, &put_, &mget_, &mput_);
    if (work_.config().mode == Mode::kUnary) {
      if (is_get_) {
        get_reader_ = stub_->PrepareAsyncGet(context_.get(), get_, cq_);
        get_reader_->StartCall();
        get_reader_->Finish(&get_out_, &status_, this);
      } else {
        put_reader_ = stub_->PrepareAsyncPut(context_.get(), put_, cq_);
        put_reader_->StartCall();
        put_reader_->Finish(&put_out_, &status_, this);
      }
    } else if (is_get_) {
      mget_reader_ = stub_->PrepareAsyncMultiGet(context_.get(), mget_, cq_);
      mget_reader_->StartCall();
      mget_reader_->Finish(&mget_out_, &status_, this);
    } else {
      mput_reader_ = stub_->PrepareAsyncMultiPut(context_.get(), mput_, cq_);
      mput_reader_->StartCall();
      mput_reader_->Finish(&mput_out_, &status_, this);
    }
  }

  void WriteBatch() {
    work_.FillStream(&stream_out_);
    phase_ = Phase::kStreamWriting;
    stream_->Write(stream_out_, this);
  }

  bool Broken() {
    work_.Broken(grpc::StatusCode::UNAVAILABLE);
    return false;
  }

  pb::KV::Stub* const stub_;
  grpc::CompletionQueue* const cq_;
  Workload work_;

  Phase phase_ = Phase::kCall;
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
};

void RunGrpcThread(const std::vector<std::unique_ptr<pb::KV::Stub>>& stubs, const Config& config,
                   uint32_t thread, uint32_t threads, uint32_t concurrency,
                   const std::atomic<bool>& stop, Tally* tally) {
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<GrpcSlot>> slots;
  for (uint32_t s = thread; s < concurrency; s += threads) {
    slots.push_back(std::make_unique<GrpcSlot>(stubs[s % stubs.size()].get(), &cq, config,
                                               SlotSeed(config, s), tally));
  }
  for (auto& slot : slots) slot->Start();
  size_t live = slots.size();
  void* tag;
  bool ok;
  while (live > 0 && cq.Next(&tag, &ok)) {
    if (!static_cast<GrpcSlot*>(tag)->OnEvent(ok, stop.load(std::memory_order_relaxed))) --live;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// A call slot on an H2Channel: the same workload; the channel's callbacks drive it.
class H2Slot : public CallObserver {
 public:
  // `unsent` collects the slots whose call waits for the round's flush (RunH2Thread stamps
  // them when it sends).
  H2Slot(H2Channel* channel, const Config& config, uint64_t seed, Tally* tally,
         const std::atomic<bool>& stop, std::vector<H2Slot*>* unsent)
      : channel_(channel), work_(config, seed, tally), stop_(stop), unsent_(unsent) {}

  bool done() const { return done_; }
  void Stamp(Clock::time_point sent) { work_.Stamp(sent); }

  void Start() {
    if (work_.config().mode == Mode::kStream) {
      call_ = channel_->StartCall("/ringkv.v1.KV/Stream", this);
      if (call_ == nullptr) return Broken();
      WriteBatch();
      return;
    }
    Issue();
  }

  void OnMessage(std::string_view bytes) override {
    const Mode mode = work_.config().mode;
    bool parsed;
    if (mode == Mode::kStream) {
      bool done = false;
      parsed = work_.TakeStreamReply(bytes, &done);
      if (parsed && done) {
        if (stop_.load(std::memory_order_relaxed)) {
          channel_->CloseSend(call_);
        } else {
          WriteBatch();
        }
      }
    } else if (mode == Mode::kUnary) {
      parsed = !is_get_ || Workload::ReadGetValueBytes(bytes, &get_value_bytes_);
    } else if (is_get_) {
      parsed = mget_out_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
    } else {
      parsed = mput_out_.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
    }
    if (!parsed) bad_reply_ = true;
  }

  void OnFinish(const absl::Status& status) override {
    call_ = nullptr;
    const Mode mode = work_.config().mode;
    if (mode == Mode::kStream) {
      if (!status.ok() || bad_reply_) work_.Broken(static_cast<int>(status.code()));
      done_ = true;
      return;
    }
    if (!status.ok() || bad_reply_) {
      work_.TakeFailure(status.ok() ? grpc::StatusCode::INTERNAL : static_cast<int>(status.code()));
    } else if (mode == Mode::kUnary) {
      work_.TakeUnary(get_value_bytes_);
    } else if (is_get_) {
      work_.TakeBatch(mget_out_.results());
    } else {
      work_.TakeBatch(mput_out_.results());
    }
    if (stop_.load(std::memory_order_relaxed) ||
        (!status.ok() && work_.Ends(static_cast<int>(status.code())))) {
      done_ = true;
      return;
    }
    Issue();
  }

 private:
  void Issue() {
    bad_reply_ = false;
    is_get_ = work_.FillCall(&get_, &put_, &mget_, &mput_);
    const google::protobuf::MessageLite* request;
    const char* path;
    if (work_.config().mode == Mode::kUnary) {
      get_value_bytes_ = 0;
      request = is_get_ ? static_cast<const google::protobuf::MessageLite*>(&get_) : &put_;
      path = is_get_ ? "/ringkv.v1.KV/Get" : "/ringkv.v1.KV/Put";
    } else {
      request = is_get_ ? static_cast<const google::protobuf::MessageLite*>(&mget_) : &mput_;
      path = is_get_ ? "/ringkv.v1.KV/MultiGet" : "/ringkv.v1.KV/MultiPut";
    }
    call_ = channel_->StartCall(
        path, this,
        work_.config().follow
            ? std::chrono::duration_cast<std::chrono::nanoseconds>(kFollowDeadline).count()
            : 0);
    if (call_ == nullptr) return Broken();
    channel_->Send(call_, *request, /*end=*/true);
    unsent_->push_back(this);
  }

  void WriteBatch() {
    work_.FillStream(&stream_out_);
    channel_->Send(call_, stream_out_, /*end=*/false);
    unsent_->push_back(this);
  }

  void Broken() {
    work_.Broken(grpc::StatusCode::UNAVAILABLE);
    done_ = true;
  }

  H2Channel* const channel_;
  Workload work_;
  const std::atomic<bool>& stop_;
  std::vector<H2Slot*>* const unsent_;
  H2Channel::Call* call_ = nullptr;
  bool is_get_ = false;
  bool bad_reply_ = false;
  bool done_ = false;
  pb::GetRequest get_;
  size_t get_value_bytes_ = 0;  // The unary GET reply's value.
  pb::PutRequest put_;
  pb::MultiGetRequest mget_;
  pb::MultiGetResponse mget_out_;
  pb::MultiPutRequest mput_;
  pb::MultiPutResponse mput_out_;
  pb::StreamRequest stream_out_;
};

// One thread of the h2 client: an epoll loop over the connections this thread owns (every
// `threads`-th), with the slots whose connection it owns.
void RunH2Thread(const std::vector<std::unique_ptr<H2Channel>>& channels, const Config& config,
                 uint32_t thread, uint32_t threads, uint32_t concurrency,
                 const std::atomic<bool>& stop, Tally* tally) {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  std::vector<H2Channel*> mine;
  for (size_t c = thread; c < channels.size(); c += threads) {
    mine.push_back(channels[c].get());
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.ptr = channels[c].get();
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, channels[c]->fd(), &event);
  }
  std::vector<std::unique_ptr<H2Slot>> slots;
  std::vector<H2Slot*> unsent;  // Calls issued this round, not yet flushed.
  for (uint32_t s = 0; s < concurrency; ++s) {
    if (s % channels.size() % threads != thread) continue;
    slots.push_back(std::make_unique<H2Slot>(channels[s % channels.size()].get(), config,
                                             SlotSeed(config, s), tally, stop, &unsent));
  }
  for (auto& slot : slots) slot->Start();
  std::vector<bool> want_out(mine.size(), false);
  epoll_event events[64];
  for (;;) {
    // Everything the last turn's callbacks started goes out, one send per connection; its
    // latency counts from here.
    const Clock::time_point sent = Clock::now();
    for (H2Slot* slot : unsent) slot->Stamp(sent);
    unsent.clear();
    for (size_t i = 0; i < mine.size(); ++i) {
      mine[i]->Flush();
      const bool out = mine[i]->WantsWrite();
      if (out != want_out[i] && mine[i]->fd() >= 0) {
        want_out[i] = out;
        epoll_event event{};
        event.events = EPOLLIN | (out ? EPOLLOUT : 0u);
        event.data.ptr = mine[i];
        epoll_ctl(epoll_fd, EPOLL_CTL_MOD, mine[i]->fd(), &event);
      }
    }
    if (std::all_of(slots.begin(), slots.end(), [](const auto& s) { return s->done(); })) break;
    const int n = epoll_wait(epoll_fd, events, 64, 100);
    for (int i = 0; i < n; ++i) static_cast<H2Channel*>(events[i].data.ptr)->OnReadable();
  }
  close(epoll_fd);
}

// What a run is, from the flags: the calls (Config) and how they travel.
struct Plan {
  Config config;
  bool h2 = true;  // --client=h2, else grpc++.
  std::string addr;
  uint32_t connections = 1;
  uint32_t concurrency = 1;
  uint32_t threads = 1;
  CredentialFiles files;
  ClientCredentials credentials;
  // With --etcd and --group: a client that finds the group's primary (and watches its leader
  // key), asked again whenever the run's calls fail.
  std::shared_ptr<Client> finder;
};

void SetUsage() {
  // Off for the reason given in server/daemon.cc: Debian's Abseil checks every gRPC lock for
  // deadlocks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(
      "drives a running ringkv-server and reports ops/s, MB/s, latency percentiles and its own "
      "CPU per operation.\n"
      "  ringkv-loadgen [--addr=HOST:PORT] [--client=h2|grpc] [--mode=unary|multi|stream] "
      "[--connections=1] [--concurrency=50] [--ratio=1:0] ...\n"
      "Exit status: 0 ok, 1 some calls failed, 2 usage error, 3 server unreachable.");
}

// --mode, --batch, --keys, --value-size, --preload, --ttl-ms, --ratio.
Config ParseCallsOrExit(const char* argv0) {
  Config config;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "unary") {
    config.mode = Mode::kUnary;
  } else if (mode == "multi") {
    config.mode = Mode::kMulti;
  } else if (mode == "stream") {
    config.mode = Mode::kStream;
  } else {
    ExitUsageError(argv0, "--mode must be unary, multi or stream");
  }
  config.batch = absl::GetFlag(FLAGS_batch);
  config.keys = absl::GetFlag(FLAGS_keys);
  config.value.assign(absl::GetFlag(FLAGS_value_size), 'v');
  config.preload = absl::GetFlag(FLAGS_preload);
  config.ttl_ms = absl::GetFlag(FLAGS_ttl_ms);
  config.seed = absl::GetFlag(FLAGS_seed);
  if (config.ttl_ms < 0) ExitUsageError(argv0, "--ttl_ms must be >= 0");
  if (config.ttl_ms > 0 && config.preload) {
    ExitUsageError(argv0, "--ttl_ms needs --preload=false (keys that expire make GETs miss)");
  }
  std::vector<std::string> ratio = absl::StrSplit(absl::GetFlag(FLAGS_ratio), ':');
  double gets = 0;
  double puts = 0;
  if (ratio.size() != 2 || !absl::SimpleAtod(ratio[0], &gets) ||
      !absl::SimpleAtod(ratio[1], &puts) || gets < 0 || puts < 0 || gets + puts <= 0) {
    ExitUsageError(argv0, "--ratio must be GET:PUT, e.g. 1:0 or 9:1");
  }
  config.get_fraction = gets / (gets + puts);
  config.consistency = absl::GetFlag(FLAGS_consistency);
  if (!config.consistency.empty() && config.consistency != "linearizable" &&
      config.consistency != "serializable") {
    ExitUsageError(argv0, "--consistency must be linearizable or serializable, got '" +
                              config.consistency + "'");
  }
  config.min_replicas = absl::GetFlag(FLAGS_min_replicas);
  uint32_t min_replicas = 0;
  if (!config.min_replicas.empty() && !absl::SimpleAtoi(config.min_replicas, &min_replicas)) {
    ExitUsageError(argv0, "--min_replicas must be a number, got '" + config.min_replicas + "'");
  }
  return config;
}

Plan ParsePlanOrExit(int argc, char** argv) {
  SetUsage();
  std::vector<char*> rest = ParseCommandLineOrExit(argc, argv);
  if (rest.size() > 1) {
    ExitUsageError(argv[0], absl::StrCat("unexpected argument '", rest[1], "'"));
  }
  Plan plan;
  plan.config = ParseCallsOrExit(argv[0]);
  const std::string client = absl::GetFlag(FLAGS_client);
  if (client != "h2" && client != "grpc") {
    ExitUsageError(argv[0], "--client must be h2 or grpc, got '" + client + "'");
  }
  plan.h2 = client == "h2";
  plan.connections = absl::GetFlag(FLAGS_connections);
  plan.concurrency = absl::GetFlag(FLAGS_concurrency);
  // An h2 thread owns whole connections, so there are no more threads than connections.
  plan.threads = std::min({absl::GetFlag(FLAGS_threads), plan.concurrency,
                           plan.h2 ? plan.connections : plan.concurrency});
  if (plan.connections == 0 || plan.concurrency == 0 || plan.threads == 0 ||
      plan.config.batch == 0 || plan.config.keys == 0) {
    ExitUsageError(argv[0],
                   "--connections, --concurrency, --threads, --batch and --keys must be >= 1");
  }
  if (plan.connections > 100'000) ExitUsageError(argv[0], "--connections must be at most 100000");
  if (plan.config.keys > kMaxKeys) ExitUsageError(argv[0], "--keys must be at most 10^12");
  plan.addr = absl::GetFlag(FLAGS_addr);
  plan.files = {.token_file = absl::GetFlag(FLAGS_token_file),
                .tls = absl::GetFlag(FLAGS_tls),
                .tls_ca = absl::GetFlag(FLAGS_tls_ca),
                .tls_cert = absl::GetFlag(FLAGS_tls_cert),
                .tls_key = absl::GetFlag(FLAGS_tls_key)};
  absl::StatusOr<ClientCredentials> credentials = LoadCredentials(plan.files);
  if (!credentials.ok()) ExitUsageError(argv[0], std::string(credentials.status().message()));
  plan.credentials = *std::move(credentials);
  if (!plan.credentials.token.empty()) {
    plan.config.authorization = "Bearer " + plan.credentials.token;
  }
  Discovery discovery;
  discovery.etcd = absl::StrSplit(absl::GetFlag(FLAGS_etcd), ',', absl::SkipWhitespace());
  discovery.group = absl::GetFlag(FLAGS_group);
  if (discovery.etcd.empty() != discovery.group.empty()) {
    ExitUsageError(argv[0], "--etcd and --group go together");
  }
  absl::StatusOr<etcd::EtcdClient::Tls> etcd_tls = etcd::EtcdClient::LoadTls(
      absl::GetFlag(FLAGS_etcd_ca), absl::GetFlag(FLAGS_etcd_cert), absl::GetFlag(FLAGS_etcd_key));
  if (!etcd_tls.ok()) ExitUsageError(argv[0], std::string(etcd_tls.status().message()));
  discovery.etcd_tls = *std::move(etcd_tls);
  if (!discovery.etcd.empty()) {
    // A read goes to the primary the leader key names (waiting out an election): that server.
    plan.finder =
        std::make_shared<Client>("", absl::Seconds(5), plan.credentials, std::move(discovery));
    if (absl::Status found = plan.finder->Stats().status(); !found.ok()) {
      std::fprintf(stderr, "ringkv-loadgen: no primary found: %s\n",
                   std::string(found.message()).c_str());
      ExitWithoutTeardown(3);  // gRPC has started (base/exit.h).
    }
    plan.addr = plan.finder->address();
    plan.config.follow = true;
  }
  return plan;
}

// The run's connections: h2 channels, or grpc++ channels, each its own connection (a local
// subchannel pool keeps gRPC from sharing one).
struct Connections {
  std::unique_ptr<ClientTls> h2_tls;
  std::vector<std::unique_ptr<H2Channel>> h2_channels;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<pb::KV::Stub>> stubs;
};

// False (and why, on stderr unless `quiet`) if the server cannot be reached.
bool Connect(const char* argv0, const Plan& plan, Connections* out, bool quiet = false) {
  if (plan.h2 && plan.credentials.tls) {
    absl::StatusOr<std::unique_ptr<ClientTls>> tls = ClientTls::Load(
        {.ca = plan.files.tls_ca, .cert = plan.files.tls_cert, .key = plan.files.tls_key});
    if (!tls.ok()) ExitUsageError(argv0, std::string(tls.status().message()));
    out->h2_tls = *std::move(tls);
  }
  for (uint32_t i = 0; i < plan.connections; ++i) {
    if (plan.h2) {
      absl::StatusOr<std::unique_ptr<H2Channel>> channel =
          H2Channel::Connect(plan.addr, {.tls = out->h2_tls.get(),
                                         .token = plan.credentials.token,
                                         .consistency = plan.config.consistency,
                                         .min_replicas = plan.config.min_replicas});
      if (!channel.ok()) {
        if (!quiet) {
          std::fprintf(stderr, "ringkv-loadgen: %s\n",
                       std::string(channel.status().message()).c_str());
        }
        return false;
      }
      out->h2_channels.push_back(std::move(*channel));
      continue;
    }
    grpc::ChannelArguments args = Client::ChannelArgs();
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("ringkv.channel", static_cast<int>(i));  // Distinct args: distinct channels.
    out->channels.push_back(
        grpc::CreateCustomChannel(plan.addr, Client::ChannelCredentials(plan.credentials), args));
    out->stubs.push_back(pb::KV::NewStub(out->channels.back()));
  }
  for (auto& channel : out->channels) {
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      if (!quiet) {
        std::fprintf(stderr, "ringkv-loadgen: cannot reach ringkv-server at %s\n",
                     plan.addr.c_str());
      }
      return false;
    }
  }
  return true;
}

// MultiPuts every key; false (and why, on stderr) if one fails. `*addr`: the server that took
// them (a replica redirects its writes to its primary).
bool Preload(const Plan& plan, std::string* addr) {
  const Config& config = plan.config;
  Client loader(plan.addr, absl::Seconds(60), plan.credentials);
  // Batches of up to 1,000 keys and about 1 MiB, well under the server's message limit.
  const size_t per_batch =
      std::clamp<size_t>((size_t{1} << 20) / (config.value.size() + 32), 1, 1000);
  std::vector<std::pair<std::string, std::string>> items;
  for (uint64_t k = 0; k < config.keys; ++k) {
    items.emplace_back(Key(k), config.value);
    if (items.size() == per_batch || k + 1 == config.keys) {
      auto result = loader.MultiPut(items);
      if (!result.ok()) {
        std::fprintf(stderr, "ringkv-loadgen: pre-load failed: %s\n",
                     std::string(result.status().message()).c_str());
        return false;
      }
      items.clear();
    }
  }
  *addr = loader.address();
  return true;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(usage.ru_utime) + s(usage.ru_stime);
}

// What a run measured: its tallies merged, how long it took, the client's CPU, and the
// primaries it followed (--etcd).
struct Measured {
  Tally all;
  double seconds = 0;
  double client_cpu = 0;
  std::vector<std::string> moves;  // "A -> B at T s, G s without calls", one per move.
};

// With a group (plan.finder), called by the control thread once every slot has ended: the
// group's primary now, if the server the finder reaches says it leads the group (the finder
// follows the leader key, waiting out an election); empty if none does yet (a primary
// restarted on its address is no longer one, though the key names it until its lease ends).
std::string LeadingPrimary(const Plan& plan) {
  absl::StatusOr<pb::StatsResponse> stats = plan.finder->Stats();
  if (!stats.ok() || !stats->replication().group().leading()) return {};
  return plan.finder->address();
}

// Runs the load on `plan.threads` threads until --duration or --ops, with a progress line. In a
// group (--etcd), once every thread has stopped (each slot's call failed for want of its
// server, or its connection broke: Config::follow), the run waits for a server that leads the
// group (the one it was on, or a new primary), connects to it and goes on there, into the same
// tallies; the calls the move cut count as errors.
void RunLoad(const char* argv0, Plan& plan, Connections& connections, Measured* out) {
  const uint64_t max_ops = absl::GetFlag(FLAGS_ops);
  const double duration = absl::GetFlag(FLAGS_duration);
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> running{0};
  std::vector<Tally> tallies(plan.threads);
  std::vector<std::thread> workers;
  auto start = [&] {
    stop.store(false, std::memory_order_relaxed);
    running.store(plan.threads, std::memory_order_relaxed);
    for (uint32_t t = 0; t < plan.threads; ++t) {
      workers.emplace_back([&, t] {
        if (plan.h2) {
          RunH2Thread(connections.h2_channels, plan.config, t, plan.threads, plan.concurrency, stop,
                      &tallies[t]);
        } else {
          RunGrpcThread(connections.stubs, plan.config, t, plan.threads, plan.concurrency, stop,
                        &tallies[t]);
        }
        running.fetch_sub(1, std::memory_order_release);
      });
    }
  };
  auto halt = [&] {
    stop.store(true, std::memory_order_relaxed);
    for (auto& w : workers) w.join();
    workers.clear();
  };
  auto total_ops = [&] {
    uint64_t n = 0;
    for (const Tally& tally : tallies) n += tally.progress.load(std::memory_order_relaxed);
    return n;
  };
  const double cpu0 = CpuSeconds();
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  start();
  // This thread stops the run at --duration or --ops, follows the primary, and reports progress.
  constexpr double kGiveUpS = 30;
  double stalled_at = -1;  // When every thread had stopped, until the run goes on.
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t ops = total_ops();
    if ((max_ops > 0 && ops >= max_ops) || (max_ops == 0 && elapsed() >= duration)) break;
    if (plan.finder != nullptr && running.load(std::memory_order_acquire) == 0) {
      halt();
      if (stalled_at < 0) stalled_at = elapsed();
      if (elapsed() - stalled_at > kGiveUpS) {
        out->moves.push_back(absl::StrFormat(
            "none reachable for %.0f s from %.1f s on: the run ends", kGiveUpS, stalled_at));
        break;
      }
      const std::string primary = LeadingPrimary(plan);
      const std::string from = plan.addr;
      if (!primary.empty()) plan.addr = primary;
      connections = {};
      // Not yet (no server leads, or it is not reachable yet): the next look tries again.
      if (!primary.empty() && Connect(argv0, plan, &connections, /*quiet=*/true)) {
        if (plan.addr != from) {
          out->moves.push_back(absl::StrFormat("%s -> %s at %.1f s, %.2f s without calls", from,
                                               plan.addr, stalled_at, elapsed() - stalled_at));
        }
        stalled_at = -1;
        start();
      }
    }
    if (absl::GetFlag(FLAGS_progress) && static_cast<int>(elapsed() * 10) % 10 == 0) {
      std::fprintf(stderr, "\r%.0f s: %llu ops", elapsed(), static_cast<unsigned long long>(ops));
    }
  }
  out->seconds = elapsed();
  halt();
  out->client_cpu = CpuSeconds() - cpu0;
  if (absl::GetFlag(FLAGS_progress)) std::fprintf(stderr, "\n");
  for (const Tally& tally : tallies) {
    out->all.latency.Merge(tally.latency);
    out->all.ops += tally.ops;
    out->all.value_bytes += tally.value_bytes;
    out->all.gets += tally.gets;
    out->all.get_hits += tally.get_hits;
    for (const auto& [code, n] : tally.errors) out->all.errors[code] += n;
  }
}

// Prints the results (and writes --json); the exit status: 1 if any call failed.
int Report(const Plan& plan, const Measured& m) {
  const Tally& all = m.all;
  const Config& config = plan.config;
  uint64_t error_count = 0;
  std::string errors;
  for (const auto& [code, n] : all.errors) {
    error_count += n;
    absl::StrAppend(&errors, errors.empty() ? "" : ", ", "code ", code, ": ", n);
  }
  const double ops_per_s = static_cast<double>(all.ops) / m.seconds;
  const double mb_per_s = static_cast<double>(all.value_bytes) / m.seconds / 1e6;
  const double client_us_per_op =
      all.ops == 0 ? 0 : m.client_cpu * 1e6 / static_cast<double>(all.ops);
  auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const std::string client = absl::GetFlag(FLAGS_client);
  std::printf(
      "mode %s, client %s, batch %u, %u in flight over %u connection(s), GET:PUT %s, %u-byte "
      "values, %llu keys, %.1f s%s%s%s%s\n",
      mode.c_str(), client.c_str(), config.mode == Mode::kUnary ? 1 : config.batch,
      plan.concurrency, plan.connections, absl::GetFlag(FLAGS_ratio).c_str(),
      absl::GetFlag(FLAGS_value_size), static_cast<unsigned long long>(config.keys), m.seconds,
      config.consistency.empty() ? "" : ", consistency ", config.consistency.c_str(),
      config.min_replicas.empty() ? "" : ", min replicas ", config.min_replicas.c_str());
  std::printf(
      "ops/s %.0f, MB/s %.2f, latency per call p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, "
      "max %.3f ms, client CPU %.2f us/op, errors %llu%s%s%s\n",
      ops_per_s, mb_per_s, ms(all.latency.Percentile(50)), ms(all.latency.Percentile(99)),
      ms(all.latency.Percentile(99.9)), ms(all.latency.max()), client_us_per_op,
      static_cast<unsigned long long>(error_count), errors.empty() ? "" : " (", errors.c_str(),
      errors.empty() ? "" : ")");
  for (const std::string& move : m.moves) std::printf("followed the primary: %s\n", move.c_str());
  const double hit_rate =
      all.gets == 0 ? 0 : static_cast<double>(all.get_hits) / static_cast<double>(all.gets);
  if (!config.preload && all.gets > 0) {
    std::printf("GET hits %llu of %llu (%.1f%%)\n", static_cast<unsigned long long>(all.get_hits),
                static_cast<unsigned long long>(all.gets), 100 * hit_rate);
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << absl::StrFormat(
        "{\"mode\":\"%s\",\"client\":\"%s\",\"batch\":%u,\"concurrency\":%u,\"connections\":%u,"
        "\"ratio\":\"%s\",\"value_size\":%u,\"keys\":%d,\"seconds\":%.3f,\"ops\":%d,"
        "\"ops_per_s\":%.1f,\"mb_per_s\":%.3f,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"p999_ms\":%.4f,"
        "\"max_ms\":%.4f,\"client_cpu_s\":%.4f,\"client_cpu_us_per_op\":%.3f,\"errors\":%d,"
        "\"gets\":%d,\"get_hits\":%d,\"ttl_ms\":%d,\"moves\":%d}\n",
        mode, client, config.batch, plan.concurrency, plan.connections, absl::GetFlag(FLAGS_ratio),
        absl::GetFlag(FLAGS_value_size), config.keys, m.seconds, all.ops, ops_per_s, mb_per_s,
        ms(all.latency.Percentile(50)), ms(all.latency.Percentile(99)),
        ms(all.latency.Percentile(99.9)), ms(all.latency.max()), m.client_cpu, client_us_per_op,
        error_count, all.gets, all.get_hits, config.ttl_ms, m.moves.size());
  }
  return error_count == 0 ? 0 : 1;
}

int Main(int argc, char** argv) {
  Plan plan = ParsePlanOrExit(argc, argv);
  Connections connections;
  if (!Connect(argv[0], plan, &connections)) return 3;
  if (absl::GetFlag(FLAGS_hold)) {
    std::printf("holding %u connections\n", plan.connections);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(absl::GetFlag(FLAGS_duration)));
    return 0;
  }
  if (plan.config.preload) {
    std::string addr;
    if (!Preload(plan, &addr)) return 3;
    if (addr != plan.addr) {  // A replica's redirect, followed once: the run goes there too.
      std::fprintf(stderr, "ringkv-loadgen: %s is a replica; running against its primary %s\n",
                   plan.addr.c_str(), addr.c_str());
      plan.addr = addr;
      connections = {};
      if (!Connect(argv[0], plan, &connections)) return 3;
    }
  }
  Measured measured;
  RunLoad(argv[0], plan, connections, &measured);
  return Report(plan, measured);
}

}  // namespace
}  // namespace ringkv::bench

// gRPC's threads may still be winding down: base/exit.h says why the exit handlers are skipped.
int main(int argc, char** argv) { ringkv::ExitWithoutTeardown(ringkv::bench::Main(argc, argv)); }
