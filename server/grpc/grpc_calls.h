// The grpc++ call adapters: one GrpcCall (server/grpc/grpc_loop_io.h) per gRPC call, armed on a
// loop's completion queue (GrpcServices, by the method's index in the table) to accept the next
// call of its method, which drives that method's Handler
// (server/handlers/handler.h) from grpc++'s async events and is its CallSink. One adapter per
// method shape: unary (ServerAsyncResponseWriter), server-streaming (ServerAsyncWriter, with
// AsyncNotifyWhenDone telling it of a cancel) and bidirectional (ServerAsyncReaderWriter).
//
// An adapter arms its successor when its call arrives, so every loop always has calls of every
// method waiting. It is retired (GrpcLoopIo::Retire) once its handler has finished and none of
// its grpc++ operations is outstanding.
//
// Threads: the owning loop's thread only.
#ifndef RINGKV_SERVER_GRPC_GRPC_CALLS_H_
#define RINGKV_SERVER_GRPC_GRPC_CALLS_H_

#include "server/grpc/grpc_loop_io.h"

namespace ringkv {

// Arms `per_method` calls of every method of the method table on `io`'s completion queue (a
// GrpcLoopIo::ArmCalls).
void ArmGrpcCalls(GrpcLoopIo& io, int per_method);

}  // namespace ringkv

#endif  // RINGKV_SERVER_GRPC_GRPC_CALLS_H_
