// Methods: every RPC ringkv-server serves, in one table that both transports route by. A method
// is its HTTP/2 :path, its shape, how a drain treats it, and the factory of its Handler.
// Constant; any thread.
//
//   const Method* method = FindMethod("/ringkv.v1.KV/Get");
//   std::unique_ptr<Handler> handler = method->make(host, sink);
#ifndef RINGKV_SERVER_HANDLERS_METHODS_H_
#define RINGKV_SERVER_HANDLERS_METHODS_H_

#include <memory>
#include <string_view>
#include <vector>

#include "server/auth/role.h"
#include "server/handlers/handler.h"

namespace ringkv {

enum class MethodKind {
  kUnary,            // One request message, one response message.
  kServerStreaming,  // One request message, any number of responses.
  kBidiStreaming,    // Messages both ways; the handler Reads each request message.
};

enum class MethodId {
  kGet,
  kPut,
  kDelete,
  kMultiGet,
  kMultiPut,
  kStream,
  kStats,
  kExpire,
  kPersist,
  kIncrement,
  kScan,
  kSnapshot,
  kHealthCheck,
  kHealthWatch,
  kReflectionV1alpha,
  kReflectionV1,
  kReplicationFlow,
  kReplicationReplicate,
  kReplicationFailover,
};
inline constexpr int kMethodCount = static_cast<int>(MethodId::kReplicationFailover) + 1;

// Written with designated initializers; the flags' defaults fit most methods.
struct Method {
  MethodId id;
  std::string_view path;  // "/ringkv.v1.KV/Get", as HTTP/2's :path carries it.
  MethodKind kind = MethodKind::kUnary;
  // The least role a caller's token must grant (with --auth-token-file; server/auth/).
  Role needs = Role::kAdmin;
  std::unique_ptr<Handler> (*make)(HandlerHost& host, CallSink& sink) = nullptr;
  // Served while the server drains (health: it is how a balancer learns of the drain). Others
  // are refused with UNAVAILABLE from the moment the drain starts.
  bool served_while_draining = false;
  // In the server's count of calls being served, which a drain waits for. Health Watch and
  // reflection streams are not: an idle one left open must not hold up a stop.
  bool counted = true;

  // "ringkv.v1.KV" of "/ringkv.v1.KV/Get".
  std::string_view service() const { return path.substr(1, path.rfind('/') - 1); }
};

const Method& MethodOf(MethodId id);
// The method `path` names, or null.
const Method* FindMethod(std::string_view path);
// The fully qualified names of the services served, each once, in table order.
std::vector<std::string_view> ServiceNames();

}  // namespace ringkv

#endif  // RINGKV_SERVER_HANDLERS_METHODS_H_
