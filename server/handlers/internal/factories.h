// The handler factories behind the method table (server/handlers/methods.cc). Each handler
// class lives in the .cc file of its service; only its factory is visible.
#ifndef RINGKV_SERVER_HANDLERS_INTERNAL_FACTORIES_H_
#define RINGKV_SERVER_HANDLERS_INTERNAL_FACTORIES_H_

#include <memory>

#include "server/handlers/handler.h"

namespace ringkv::internal {

// kv_handlers.cc: ringkv.v1.KV.
std::unique_ptr<Handler> MakeGetHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakePutHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeDeleteHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeMultiGetHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeMultiPutHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeStreamHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeStatsHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeExpireHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakePersistHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeIncrementHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeScanHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeSnapshotHandler(ShardLoop& loop, CallSink& sink);

// health_handlers.cc: grpc.health.v1.Health.
std::unique_ptr<Handler> MakeHealthCheckHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeHealthWatchHandler(ShardLoop& loop, CallSink& sink);

// reflection_handler.cc: grpc.reflection.v1alpha and v1 ServerReflection.
std::unique_ptr<Handler> MakeReflectionV1alphaHandler(ShardLoop& loop, CallSink& sink);
std::unique_ptr<Handler> MakeReflectionV1Handler(ShardLoop& loop, CallSink& sink);

}  // namespace ringkv::internal

#endif  // RINGKV_SERVER_HANDLERS_INTERNAL_FACTORIES_H_
