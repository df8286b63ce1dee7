#include "server/handlers/methods.h"

#include <algorithm>
#include <array>

#include "server/handlers/internal/factories.h"
#include "server/shard_loop.h"

namespace ringkv {
namespace {

using internal::MakeDeleteHandler;
using internal::MakeExpireHandler;
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
using internal::MakeScanHandler;
using internal::MakeSnapshotHandler;
using internal::MakeStatsHandler;
using internal::MakeStreamHandler;

constexpr MethodKind kUnary = MethodKind::kUnary;
constexpr Role kOpen = Role::kNone;
constexpr Role kRead = Role::kRead;
constexpr Role kWrite = Role::kWrite;
constexpr Role kAdmin = Role::kAdmin;

// In MethodId order; the hot methods first, since FindMethod scans. Stream needs read to
// open; each of its writes needs write (StreamHandler checks them one by one).
const std::array<Method, kMethodCount> kMethods = {{
    {MethodId::kGet, "/ringkv.v1.KV/Get", kUnary, false, true, kRead, MakeGetHandler},
    {MethodId::kPut, "/ringkv.v1.KV/Put", kUnary, false, true, kWrite, MakePutHandler},
    {MethodId::kDelete, "/ringkv.v1.KV/Delete", kUnary, false, true, kWrite, MakeDeleteHandler},
    {MethodId::kMultiGet, "/ringkv.v1.KV/MultiGet", kUnary, false, true, kRead,
     MakeMultiGetHandler},
    {MethodId::kMultiPut, "/ringkv.v1.KV/MultiPut", kUnary, false, true, kWrite,
     MakeMultiPutHandler},
    {MethodId::kStream, "/ringkv.v1.KV/Stream", MethodKind::kBidiStreaming, false, true, kRead,
     MakeStreamHandler},
    {MethodId::kStats, "/ringkv.v1.KV/Stats", kUnary, false, true, kRead, MakeStatsHandler},
    {MethodId::kExpire, "/ringkv.v1.KV/Expire", kUnary, false, true, kWrite, MakeExpireHandler},
    {MethodId::kPersist, "/ringkv.v1.KV/Persist", kUnary, false, true, kWrite, MakePersistHandler},
    {MethodId::kIncrement, "/ringkv.v1.KV/Increment", kUnary, false, true, kWrite,
     MakeIncrementHandler},
    {MethodId::kScan, "/ringkv.v1.KV/Scan", kUnary, false, true, kRead, MakeScanHandler},
    {MethodId::kSnapshot, "/ringkv.v1.KV/Snapshot", kUnary, false, true, kAdmin,
     MakeSnapshotHandler},
    {MethodId::kHealthCheck, "/grpc.health.v1.Health/Check", kUnary, true, true, kOpen,
     MakeHealthCheckHandler},
    {MethodId::kHealthWatch, "/grpc.health.v1.Health/Watch", MethodKind::kServerStreaming, true,
     false, kOpen, MakeHealthWatchHandler},
    {MethodId::kReflectionV1alpha, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
     MethodKind::kBidiStreaming, false, false, kRead, MakeReflectionV1alphaHandler},
    {MethodId::kReflectionV1, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
     MethodKind::kBidiStreaming, false, false, kRead, MakeReflectionV1Handler},
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
