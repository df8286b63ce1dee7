// BidiHandler: what every bidirectional handler (KV's Stream, reflection) does with its call,
// so that each supplies only what it does with a message. One Read at a time, while the
// subclass has room for more work and fewer than kMaxRepliesQueued reply messages wait (so a
// client that writes but never reads is held back by HTTP/2 flow control, and memory stays
// bounded); replies go out one Write at a time; the call finishes once the client has closed
// its side (or the call is gone), the subclass has nothing in the engine, and every reply is
// written. After a cancel, replies are dropped and the call finishes as soon as it is idle.
//
// Loop thread only, like every Handler.
//
//   class Echo : public BidiHandler<pb::Reply> {
//     google::protobuf::MessageLite* incoming() override { return &request_; }
//     void TakeMessage() override { replies_.push_back(Answer(request_)); }
//   };
#ifndef RINGKV_SERVER_HANDLERS_INTERNAL_BIDI_HANDLER_H_
#define RINGKV_SERVER_HANDLERS_INTERNAL_BIDI_HANDLER_H_

#include <deque>

#include "absl/status/status.h"
#include "server/handlers/handler.h"

namespace ringkv::internal {

template <typename ResponsePb>
class BidiHandler : public Handler {
 public:
  static constexpr size_t kMaxRepliesQueued = 4;

  using Handler::Handler;

  void OnStart() override { ReadNext(); }

  void OnMessage() final {
    reading_ = false;
    TakeMessage();
    ReadNext();
    Progress();
  }

  void OnHalfClose() final {
    reading_ = false;
    reads_done_ = true;
    Progress();
  }

  void OnWriteDone(bool ok) final {
    writing_ = false;
    replies_.pop_front();
    if (!ok) return OnCancel();  // The client is gone.
    ReadNext();
    Progress();
  }

  void OnCancel() final {
    if (cancelled_) return;
    cancelled_ = true;
    reading_ = false;
    writing_ = false;
    reads_done_ = true;
    replies_.clear();
    Progress();
  }

 protected:
  // incoming() holds a request message: act on it, queueing replies in replies_.
  virtual void TakeMessage() = 0;
  // Work of this call is still in the engine (its replies are to come).
  virtual bool Busy() const { return false; }
  // There is room for the work of another message.
  virtual bool RoomForMore() const { return true; }

  // Asks for the next message if there is room for it.
  void ReadNext() {
    if (reading_ || reads_done_ || !RoomForMore() || replies_.size() >= kMaxRepliesQueued) {
      return;
    }
    reading_ = true;
    sink_.Read();
  }

  // Writes the front reply, or finishes when everything is done.
  void Progress() {
    if (finished_ || writing_) return;
    if (!replies_.empty()) {
      writing_ = true;
      sink_.Write(replies_.front());
    } else if (reads_done_ && !reading_ && !Busy()) {
      finished_ = true;
      sink_.Finish(cancelled_ ? absl::CancelledError("call cancelled") : absl::OkStatus(), nullptr);
    }
  }

  // The reply that results go to: the back one, unless it is the one being written or has
  // passed `limit` bytes, then a new one. `bytes` is about what the caller adds to it.
  ResponsePb& Gathering(size_t bytes, size_t limit) {
    if (replies_.size() <= (writing_ ? 1u : 0u) || back_bytes_ > limit) {
      replies_.emplace_back();
      back_bytes_ = 0;
    }
    back_bytes_ += bytes;
    return replies_.back();
  }

  bool cancelled() const { return cancelled_; }

  std::deque<ResponsePb> replies_;  // The front one is being written while writing_.

 private:
  size_t back_bytes_ = 0;  // About the size of replies_.back(), for Gathering.
  bool reading_ = false;
  bool reads_done_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
};

}  // namespace ringkv::internal

#endif  // RINGKV_SERVER_HANDLERS_INTERNAL_BIDI_HANDLER_H_
