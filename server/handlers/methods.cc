#include "server/handlers/methods.h"

#include <algorithm>
#include <array>

#include "server/handlers/internal/factories.h"

namespace ringkv {
namespace {

using internal::MakeDeleteHandler;
using internal::MakeExpireHandler;
using internal::MakeFailoverHandler;
using internal::MakeFlowHandler;
using internal::MakeGetHandler;
using internal::MakeHealthCheckHandler;
using internal::MakeHealthWatchHandler;
using internal::MakeIncrementHandler;
using internal::MakeMultiGetHandler;
using internal::MakeMultiPutHandler;
using internal::MakePersistHandler;
using internal::MakePutHandler;
using internal::MakeReflectionV1alphaHandler;
using internal::MakeReflectionV1Handler;
using internal::MakeReplicateHandler;
using internal::MakeScanHandler;
using internal::MakeSnapshotHandler;
using internal::MakeStatsHandler;
using internal::MakeStreamHandler;

constexpr Role kOpen = Role::kNone;
constexpr Role kRead = Role::kRead;
constexpr Role kReplication = Role::kReplication;
constexpr Role kWrite = Role::kWrite;
constexpr Role kAdmin = Role::kAdmin;
constexpr MethodKind kServerStreaming = MethodKind::kServerStreaming;
constexpr MethodKind kBidiStreaming = MethodKind::kBidiStreaming;

// In MethodId order; the hot methods first, since FindMethod scans. Stream needs read to
// open; each of its writes needs write (StreamHandler checks them one by one).
const std::array<Method, kMethodCount> kMethods = {{
    {.id = MethodId::kGet, .path = "/ringkv.v1.KV/Get", .needs = kRead, .make = MakeGetHandler},
    {.id = MethodId::kPut, .path = "/ringkv.v1.KV/Put", .needs = kWrite, .make = MakePutHandler},
    {.id = MethodId::kDelete,
     .path = "/ringkv.v1.KV/Delete",
     .needs = kWrite,
     .make = MakeDeleteHandler},
    {.id = MethodId::kMultiGet,
     .path = "/ringkv.v1.KV/MultiGet",
     .needs = kRead,
     .make = MakeMultiGetHandler},
    {.id = MethodId::kMultiPut,
     .path = "/ringkv.v1.KV/MultiPut",
     .needs = kWrite,
     .make = MakeMultiPutHandler},
    {.id = MethodId::kStream,
     .path = "/ringkv.v1.KV/Stream",
     .kind = kBidiStreaming,
     .needs = kRead,
     .make = MakeStreamHandler},
    {.id = MethodId::kStats,
     .path = "/ringkv.v1.KV/Stats",
     .needs = kRead,
     .make = MakeStatsHandler},
    {.id = MethodId::kExpire,
     .path = "/ringkv.v1.KV/Expire",
     .needs = kWrite,
     .make = MakeExpireHandler},
    {.id = MethodId::kPersist,
     .path = "/ringkv.v1.KV/Persist",
     .needs = kWrite,
     .make = MakePersistHandler},
    {.id = MethodId::kIncrement,
     .path = "/ringkv.v1.KV/Increment",
     .needs = kWrite,
     .make = MakeIncrementHandler},
    {.id = MethodId::kScan, .path = "/ringkv.v1.KV/Scan", .needs = kRead, .make = MakeScanHandler},
    {.id = MethodId::kSnapshot,
     .path = "/ringkv.v1.KV/Snapshot",
     .needs = kAdmin,
     .make = MakeSnapshotHandler},
    {.id = MethodId::kHealthCheck,
     .path = "/grpc.health.v1.Health/Check",
     .needs = kOpen,
     .make = MakeHealthCheckHandler,
     .served_while_draining = true},
    {.id = MethodId::kHealthWatch,
     .path = "/grpc.health.v1.Health/Watch",
     .kind = kServerStreaming,
     .needs = kOpen,
     .make = MakeHealthWatchHandler,
     .served_while_draining = true,
     .counted = false},
    {.id = MethodId::kReflectionV1alpha,
     .path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
     .kind = kBidiStreaming,
     .needs = kRead,
     .make = MakeReflectionV1alphaHandler,
     .counted = false},
    {.id = MethodId::kReflectionV1,
     .path = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
     .kind = kBidiStreaming,
     .needs = kRead,
     .make = MakeReflectionV1Handler,
     .counted = false},
    // A replica's flow lasts as long as the replica follows: a drain does not wait for it.
    {.id = MethodId::kReplicationFlow,
     .path = "/ringkv.v1.Replication/Flow",
     .kind = kBidiStreaming,
     .needs = kReplication,
     .make = MakeFlowHandler,
     .counted = false},
    {.id = MethodId::kReplicationReplicate,
     .path = "/ringkv.v1.Replication/Replicate",
     .needs = kAdmin,
     .make = MakeReplicateHandler},
    {.id = MethodId::kReplicationFailover,
     .path = "/ringkv.v1.Replication/Failover",
     .needs = kAdmin,
     .make = MakeFailoverHandler},
}};

}  // namespace

const Method& MethodOf(MethodId id) { return kMethods[static_cast<size_t>(id)]; }

const Method* FindMethod(std::string_view path) {
  for (const Method& method : kMethods) {
    if (method.path == path) return &method;
  }
  return nullptr;
}

std::vector<std::string_view> ServiceNames() {
  std::vector<std::string_view> names;
  for (const Method& method : kMethods) {
    if (std::find(names.begin(), names.end(), method.service()) == names.end()) {
      names.push_back(method.service());
    }
  }
  return names;
}

}  // namespace ringkv
