#include "server/repl/replica_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "persist/format.h"
#include "ringkv/v1/kv.grpc.pb.h"

namespace ringkv::repl {
namespace {

namespace pb = ::ringkv::v1;

// The records in `records`, or -1 if they do not parse.
int64_t CountRecords(std::string_view records) {
  persist::RecordReader reader(records);
  persist::Record r;
  int64_t n = 0;
  while (reader.Next(&r)) {
    if (r.kind == persist::RecordKind::kPosition) return -1;  // A log's, not a stream's.
    ++n;
  }
  return reader.malformed() ? -1 : n;
}

}  // namespace

ReplicaClient::ReplicaClient(Options options, std::vector<ReplSink*> sinks)
    : options_(std::move(options)), sinks_(std::move(sinks)), calls_(sinks_.size(), nullptr) {}

ReplicaClient::~ReplicaClient() { Stop(); }

void ReplicaClient::Start() {
  for (uint32_t w = 0; w < sinks_.size(); ++w) threads_.emplace_back([this, w] { Follow(w); });
}

void ReplicaClient::Stop() {
  // Once: the sinks may have a new client by the time this one is destroyed.
  if (stopping_.exchange(true, std::memory_order_acq_rel)) return;
  {
    std::lock_guard lock(mu_);
    for (grpc::ClientContext* call : calls_) {
      if (call != nullptr) call->TryCancel();
    }
  }
  for (ReplSink* sink : sinks_) sink->Stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void ReplicaClient::Follow(uint32_t worker) {
  ReplSink& sink = *sinks_[worker];
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // An image part or a turn's records can be large.
  // A channel of its own per flow: one TCP connection each, as the primary's workers are.
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options_.tls.on) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls.ca_pem;
    ssl.pem_cert_chain = options_.tls.cert_pem;
    ssl.pem_private_key = options_.tls.key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateCustomChannel(options_.primary, credentials, args);
  auto stub = pb::Replication::NewStub(channel);
  auto backoff = std::chrono::milliseconds(100);
  std::string logged;  // The last failure logged: each kind once, not every retry.
  // Where this flow stands, for a partial resync: the primary's history, the position after
  // the last record handed to the worker (applied in order, so what the worker will hold), and
  // whether the image was whole (a break in the middle of one needs a full sync).
  std::string history;
  uint64_t position = 0;
  bool resumable = false;
  if (std::optional<persist::ReplPosition> from = sink.ResumeFrom()) {
    // The sink holds a whole image at that position of that history: the data directory's
    // restore, or an earlier client's flow (this server followed another primary, which this
    // one may have continued: server/repl/chunk.h).
    history = from->history;
    position = from->lsn;
    resumable = true;
  }
  while (!stopping_.load(std::memory_order_acquire)) {
    grpc::ClientContext context;
    if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
    {
      std::lock_guard lock(mu_);
      if (stopping_.load(std::memory_order_acquire)) break;
      calls_[worker] = &context;
    }
    pb::FlowRequest request;
    request.set_worker(worker);
    request.set_threads(options_.threads);
    request.set_server_id(options_.server_id);
    request.set_address(options_.address);
    if (resumable) {
      request.set_history(history);
      request.set_lsn(position);
    }
    std::unique_ptr<grpc::ClientReaderWriter<pb::FlowRequest, pb::FlowMessage>> stream =
        stub->Flow(&context);
    stream->Write(request);  // If the call failed, Read says so.
    // Acknowledgements go on the same call, from a thread of their own: Read blocks.
    sink.StartAcks();
    std::thread acker([&stream, &sink] {
      uint64_t sent = 0;
      while (const std::optional<uint64_t> next = sink.NextAck(sent)) {
        if (*next == sent) continue;
        pb::FlowRequest ack;
        ack.set_applied(*next);
        if (!stream->Write(ack)) break;
        sent = *next;
      }
    });
    pb::FlowMessage message;
    std::string error;
    bool synced = false;
    while (error.empty() && stream->Read(&message)) {
      sink.set_primary_lsn(message.head_lsn());
      if (message.kind() == pb::FlowMessage::TAIL) sink.set_primary_bytes(message.head_bytes());
      ReplSink::Item item;
      item.count = message.count();
      item.lsn = message.lsn();
      switch (message.kind()) {
        case pb::FlowMessage::FULL_SYNC:
          item.kind = ReplSink::Item::Kind::kFullSync;
          item.keys = message.keys();
          if (resumable && message.has_diverged_lsn()) item.diverged = message.diverged_lsn();
          history = message.history();
          item.history = history;
          position = message.lsn();
          resumable = false;
          sink.set_connected(true);
          sink.CountFullSync();
          Log(LogLevel::kInfo, "replica: worker %d: full sync from %s", worker, options_.primary);
          break;
        case pb::FlowMessage::PARTIAL_SYNC:
          if (!resumable || message.lsn() != position) {
            error = absl::StrCat("the primary went on from position ", message.lsn(),
                                 " where this replica is at ", position);
            continue;
          }
          sink.set_connected(true);
          sink.CountPartialSync();
          synced = true;
          backoff = std::chrono::milliseconds(100);
          Log(LogLevel::kInfo, "replica: worker %d: partial resync from %s at position %d", worker,
              options_.primary, position);
          if (message.history().empty() || message.history() == history) continue;
          // A promoted replica's history, which continues this one's: the same positions.
          history = message.history();
          item.kind = ReplSink::Item::Kind::kHistory;
          item.history = history;
          break;
        case pb::FlowMessage::IMAGE:
          item.kind = ReplSink::Item::Kind::kImage;
          break;
        case pb::FlowMessage::IMAGE_DONE:
          item.kind = ReplSink::Item::Kind::kImageDone;
          item.revision = message.revision();
          item.sync = sink.full_syncs();
          synced = true;
          resumable = true;
          backoff = std::chrono::milliseconds(100);
          break;
        case pb::FlowMessage::TAIL:
          item.kind = ReplSink::Item::Kind::kTail;
          item.ack = message.ack();
          item.made_us = message.made_unix_us();
          item.end_bytes = message.end_bytes();
          if (message.count() == 0) continue;  // A heartbeat: its head is all it says.
          if (message.lsn() != position) {
            error = absl::StrCat("the primary sent position ", message.lsn(), " where ", position,
                                 " was next");
            continue;
          }
          break;
        default:
          error = absl::StrCat("the primary sent a message of unknown kind ",
                               static_cast<int>(message.kind()));
          continue;
      }
      if (!message.records().empty() || item.count > 0) {
        if (CountRecords(message.records()) != item.count) {
          error = "the primary sent records that do not parse";
          continue;
        }
        item.records = std::move(*message.mutable_records());
      }
      const bool tail = item.kind == ReplSink::Item::Kind::kTail;
      if (!sink.Push(std::move(item))) break;  // Stopping.
      if (tail) position += message.count();
      if (options_.wake) options_.wake(worker);
    }
    if (!error.empty()) context.TryCancel();
    sink.StopAcks();
    acker.join();
    const grpc::Status status = stream->Finish();
    {
      std::lock_guard lock(mu_);
      calls_[worker] = nullptr;
    }
    sink.set_connected(false);
    if (stopping_.load(std::memory_order_acquire)) break;
    if (error.empty()) {
      error = status.ok() ? std::string("the primary ended the flow")
                          : absl::StrCat(status.error_message(), " (",
                                         static_cast<int>(status.error_code()), ")");
    }
    error = absl::StrCat("worker ", worker, ": ", options_.primary, ": ", error);
    sink.set_last_error(error);
    if (error != logged) {
      Log(synced ? LogLevel::kInfo : LogLevel::kWarning, "replica: %s; retrying", error);
      logged = error;
    }
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (!stopping_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace ringkv::repl
