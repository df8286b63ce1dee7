// The handler factories behind the method table (server/handlers/methods.cc). Each handler
// class lives in the .cc file of its service; only its factory is visible.
#ifndef RINGKV_SERVER_HANDLERS_INTERNAL_FACTORIES_H_
#define RINGKV_SERVER_HANDLERS_INTERNAL_FACTORIES_H_

#include <memory>

#include "server/handlers/handler.h"

namespace ringkv::internal {

// kv_handlers.cc: ringkv.v1.KV.
std::unique_ptr<Handler> MakeGetHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakePutHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeDeleteHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeMultiGetHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeMultiPutHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeStreamHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeStatsHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeExpireHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakePersistHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeIncrementHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeScanHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeSnapshotHandler(HandlerHost& host, CallSink& sink);

// repl_handlers.cc: ringkv.v1.Replication.
std::unique_ptr<Handler> MakeFlowHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeReplicateHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeFailoverHandler(HandlerHost& host, CallSink& sink);

// health_handlers.cc: grpc.health.v1.Health.
std::unique_ptr<Handler> MakeHealthCheckHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeHealthWatchHandler(HandlerHost& host, CallSink& sink);

// reflection_handler.cc: grpc.reflection.v1alpha and v1 ServerReflection.
std::unique_ptr<Handler> MakeReflectionV1alphaHandler(HandlerHost& host, CallSink& sink);
std::unique_ptr<Handler> MakeReflectionV1Handler(HandlerHost& host, CallSink& sink);

}  // namespace ringkv::internal

#endif  // RINGKV_SERVER_HANDLERS_INTERNAL_FACTORIES_H_
