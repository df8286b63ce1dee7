// WireMessage: a reply whose bytes its handler wrote itself (the batch methods' replies, item
// by item: AppendItem). It serializes to those bytes for either transport, which see a
// MessageLite like any other, and stands for the message type it is named after. Protobuf's
// own replies cost an object and its strings per item, made, sized, written and freed: 11% of
// the server's samples at MultiGet of 16 over 1M keys.
//
// Threads: the handler's (its loop's) only.
#ifndef RINGKV_SERVER_HANDLERS_INTERNAL_WIRE_MESSAGE_H_
#define RINGKV_SERVER_HANDLERS_INTERNAL_WIRE_MESSAGE_H_

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message_lite.h>

#include <string>

namespace ringkv::internal {

class WireMessage final : public google::protobuf::MessageLite {
 public:
  // `type_name`: the full name of the message type the bytes are (a literal, or a descriptor's).
  explicit WireMessage(const char* type_name = "") : type_name_(type_name) {}
  void set_type_name(const char* type_name) { type_name_ = type_name; }

  // The serialized message, for its handler to write.
  std::string& bytes() { return bytes_; }
  const std::string& bytes() const { return bytes_; }

  std::string GetTypeName() const override { return type_name_; }
  MessageLite* New(google::protobuf::Arena* arena) const override {
    return google::protobuf::Arena::Create<WireMessage>(arena, type_name_);
  }
  void Clear() override { bytes_.clear(); }
  bool IsInitialized() const override { return true; }
  // Protobuf merges a message into another as their bytes one after the other parse.
  void CheckTypeAndMergeFrom(const MessageLite& other) override {
    bytes_.append(static_cast<const WireMessage&>(other).bytes_);
  }
  size_t ByteSizeLong() const override { return bytes_.size(); }
  int GetCachedSize() const override { return static_cast<int>(bytes_.size()); }
  uint8_t* _InternalSerialize(uint8_t* target,
                              google::protobuf::io::EpsCopyOutputStream* stream) const override {
    return stream->WriteRaw(bytes_.data(), static_cast<int>(bytes_.size()), target);
  }

 private:
  const char* type_name_;
  std::string bytes_;
};

}  // namespace ringkv::internal

#endif  // RINGKV_SERVER_HANDLERS_INTERNAL_WIRE_MESSAGE_H_
