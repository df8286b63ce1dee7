// HandlerHost: what a Handler (server/handlers/handler.h) may ask of the loop it runs on: hand
// Requests to the engine, hand one to something else that gives it back later, be flushed at
// the end of an engine turn, be told when the server starts draining, and the ServerContext.
// ShardLoop (server/shard_loop.h) implements it; a handler test implements it without sockets
// or threads (server/handlers/handlers_test.cc).
//
// Threads: the loop's own thread, except CompleteExternal (any thread).
//
//   request.tag = handler;
//   host.Submit(&request, Lane::kCall);  // OnRequestDone(&request) in a later turn.
#ifndef RINGKV_SERVER_HANDLERS_HANDLER_HOST_H_
#define RINGKV_SERVER_HANDLERS_HANDLER_HOST_H_

#include <cstdint>

#include "server/server_context.h"
#include "shard/request.h"

namespace ringkv {

class Handler;

// Which queue a submitted Request waits in before the engine takes it. A call of one Request
// (Get, Put, Scan's parts) goes in kCall; the items of a MultiGet, MultiPut or Stream go in
// kBatch, so that a call arriving behind a batch of thousands waits a turn, not the whole batch.
enum class Lane : uint8_t { kCall, kBatch };

class HandlerHost {
 public:
  virtual ServerContext& context() = 0;

  // Hands in a Request whose Request::tag is its Handler; the Handler's OnRequestDone gets it
  // back in a later engine turn, never from inside this call. Requests of one lane are taken
  // in the order submitted.
  virtual void Submit(Request* request, Lane lane) = 0;
  // Hands out a Request that something other than the engine (the data dir's snapshotter)
  // gives back through CompleteExternal; counted as in flight until then.
  virtual void SubmitExternal(Handler* handler, Request* request) = 0;
  // Any thread: gives back a Request of SubmitExternal; its handler's OnRequestDone gets it in
  // the loop's next turn.
  virtual void CompleteExternal(Request* request) = 0;
  // `handler`'s Flush runs once the current engine turn is over, so that the answers the turn
  // completes go out together.
  virtual void RequestFlush(Handler* handler) = 0;
  // A health Watch handler, told (OnServingChanged) when the server starts draining; removed
  // before it is deleted.
  virtual void AddWatcher(Handler* handler) = 0;
  virtual void RemoveWatcher(Handler* handler) = 0;

 protected:
  ~HandlerHost() = default;
};

}  // namespace ringkv

#endif  // RINGKV_SERVER_HANDLERS_HANDLER_HOST_H_
