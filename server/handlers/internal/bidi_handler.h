// BidiHandler: what every bidirectional handler (KV's Stream, reflection) does with its call,
// so that each supplies only what it does with a message. One Read at a time, while the
// subclass has room for more work and fewer than kMaxRepliesQueued reply messages wait (so a
// client that writes but never reads is held back by HTTP/2 flow control, and memory stays
// bounded); replies go out one Write at a time; the call finishes once the client has closed
// its side (or the call is gone), the subclass has nothing in the engine, and every reply is
// written. After a cancel, replies are dropped and the call finishes as soon as it is idle.
// A reply that acknowledges writes (MarkAcknowledging) is written only while the server's fence
// is open (Handler::MayAcknowledge); once it has closed, the call ends the same way, with
// UNAVAILABLE saying that its writes may or may not stay.
//
// Loop thread only, like every Handler.
//
//   class Echo : public BidiHandler<pb::Reply> {
//     google::protobuf::MessageLite* incoming() override { return &request_; }
//     void TakeMessage() override { replies_.push_back(Answer(request_)); }
//   };
#ifndef RINGKV_SERVER_HANDLERS_INTERNAL_BIDI_HANDLER_H_
#define RINGKV_SERVER_HANDLERS_INTERNAL_BIDI_HANDLER_H_

#include <cstdint>
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
    if (cancelled_) return;  // Ended by End(), with its Read out: nothing more is taken.
    TakeMessage();
    ReadNext();
    Progress();
  }

  void OnHalfClose() final {
    reading_ = false;
    if (cancelled_) return;
    reads_done_ = true;
    Progress();
  }

  void OnWriteDone(bool ok) final {
    // Never with no Write out, by the transports' contract; if it came, popping the replies
    // would free one that was never written (or pop an empty deque).
    if (!writing_) return;
    writing_ = false;
    replies_.pop_front();
    ++front_seq_;
    Written(front_seq_);
    if (!ok) OnCancel();  // The client is gone (nothing to do if the call had ended).
    ReadNext();
    Progress();
  }

  // The transport reports no Write after a cancel: the one out is dropped too.
  void OnCancel() final { End(absl::CancelledError("call cancelled"), /*write_reported=*/false); }

 protected:
  // incoming() holds a request message: act on it, queueing replies in replies_.
  virtual void TakeMessage() = 0;
  // Work of this call is still in the engine (its replies are to come).
  virtual bool Busy() const { return false; }
  // There is room for the work of another message.
  virtual bool RoomForMore() const { return true; }
  // Every reply numbered before `end` (back_seq) has been written or dropped.
  virtual void Written(uint64_t /*end*/) {}

  // Asks for the next message if there is room for it.
  void ReadNext() {
    if (reading_ || reads_done_ || !RoomForMore() || replies_.size() >= kMaxRepliesQueued) {
      return;
    }
    reading_ = true;
    sink_.Read();
  }

  // Writes the front reply, or finishes when everything is done. A reply that acknowledges
  // writes once the fence has closed ends the call instead (Handler::MayAcknowledge).
  void Progress() {
    if (finished_ || writing_) return;
    if (!replies_.empty()) {
      if (front_seq_ < acknowledging_end_ && !MayAcknowledge()) return End(LostLeadership(false));
      writing_ = true;
      sink_.Write(replies_.front());
    } else if (reads_done_ && !reading_ && !Busy()) {
      finished_ = true;
      sink_.Finish(cancelled_ ? end_status_ : absl::OkStatus(), nullptr);
    }
  }

  // The back reply acknowledges writes.
  void MarkAcknowledging() { acknowledging_end_ = front_seq_ + replies_.size(); }

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
  // The number of replies_.back() (replies are numbered from 0 as the call makes them).
  uint64_t back_seq() const { return front_seq_ + replies_.size() - 1; }

  // Drops the replies and reads no more; the call finishes with the first End's `status` once
  // it is idle. The reply being written stays until its OnWriteDone, which the transport still
  // reports unless it has cancelled the call (`write_reported` false, which may come after an
  // End of the handler's own): the sink is not told to Finish while a Write is out, and
  // OnWriteDone pops that reply, not another. The budget the dropped replies hold is not given
  // back (Written): the call reads no more, and what its work still in the engine copies
  // stays within it.
  void End(const absl::Status& status, bool write_reported = true) {
    if (!write_reported) writing_ = false;
    if (!cancelled_) {
      cancelled_ = true;
      end_status_ = status;
      reading_ = false;
      reads_done_ = true;
    }
    const size_t kept = writing_ ? 1 : 0;
    while (replies_.size() > kept) replies_.pop_back();  // Not erase: replies need not move.
    Progress();
  }

  std::deque<ResponsePb> replies_;  // The front one is being written while writing_.

 private:
  size_t back_bytes_ = 0;  // About the size of replies_.back(), for Gathering.
  bool reading_ = false;
  bool reads_done_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  absl::Status end_status_;  // The call's status once cancelled_.
  // Replies by number since the call began: the front one is front_seq_, and those before
  // acknowledging_end_ acknowledge writes.
  uint64_t front_seq_ = 0;
  uint64_t acknowledging_end_ = 0;
};

}  // namespace ringkv::internal

#endif  // RINGKV_SERVER_HANDLERS_INTERNAL_BIDI_HANDLER_H_
