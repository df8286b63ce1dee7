#include "server/handlers/parse_request.h"

#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace ringkv {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr size_t kFieldsPerItem = 16;
constexpr size_t kFieldsBeyondItems = 1024;
constexpr int kMaxDepth = 100;  // Protobuf's own default recursion limit.

// Counts the fields `in` reads as `type`'s into `count`, to their end: the limit or the input's
// end (end_group 0), or the end-group tag `end_group`. Stops once `count` passes `most`. False
// if the bytes do not parse.
bool Count(const Descriptor* type, CodedInputStream& in, uint32_t end_group, int depth, size_t most,
           size_t* count) {
  if (depth > kMaxDepth) return false;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return end_group == 0 && in.ConsumedEntireMessage();
    if (tag == end_group) return true;
    if (++*count > most) return true;
    const int number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    const FieldDescriptor* field = type != nullptr ? type->FindFieldByNumber(number) : nullptr;
    switch (WireFormatLite::GetTagWireType(tag)) {
      case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
        if (field == nullptr || field->type() != FieldDescriptor::TYPE_MESSAGE) break;
        uint32_t length;
        if (!in.ReadVarint32(&length) || length > std::numeric_limits<int>::max()) return false;
        const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
        const bool parses = Count(field->message_type(), in, 0, depth + 1, most, count);
        in.PopLimit(limit);
        if (!parses) return false;
        if (*count > most) return true;  // Counted part of it: the rest is not read.
        continue;
      }
      case WireFormatLite::WIRETYPE_START_GROUP: {
        const Descriptor* group = field != nullptr && field->type() == FieldDescriptor::TYPE_GROUP
                                      ? field->message_type()
                                      : nullptr;
        const uint32_t end = WireFormatLite::MakeTag(number, WireFormatLite::WIRETYPE_END_GROUP);
        if (!Count(group, in, end, depth + 1, most, count)) return false;
        if (*count > most) return true;
        continue;
      }
      case WireFormatLite::WIRETYPE_END_GROUP:
        return false;  // Not the group's own end.
      default:
        break;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return false;
  }
}

}  // namespace

size_t MaxRequestFields(const RequestLimits& limits) {
  return kFieldsPerItem * limits.max_batch_items + kFieldsBeyondItems;
}

std::optional<size_t> CountMessageFields(const Descriptor* type, CodedInputStream& in,
                                         size_t most) {
  size_t count = 0;
  if (!Count(type, in, 0, 0, most, &count)) return std::nullopt;
  return count;
}

absl::Status CheckRequestFields(const google::protobuf::MessageLite& message, CodedInputStream& in,
                                const RequestLimits& limits) {
  const size_t most = MaxRequestFields(limits);
  const auto* full = dynamic_cast<const google::protobuf::Message*>(&message);
  const std::optional<size_t> fields =
      CountMessageFields(full != nullptr ? full->GetDescriptor() : nullptr, in, most);
  if (!fields.has_value() || *fields <= most) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the request message holds more than ", most,
                   " fields (unknown ones count too); the limit is ", kFieldsPerItem,
                   " for each of --max-batch-items=", limits.max_batch_items, " and ",
                   kFieldsBeyondItems, " more: split it"));
}

absl::Status CannotParse(const google::protobuf::MessageLite& message) {
  return absl::InternalError(
      absl::StrCat("cannot parse the request message as ", message.GetTypeName()));
}

absl::Status ParseRequest(Handler& handler, std::string_view wire, bool stays,
                          const RequestLimits& limits) {
  if (stays ? handler.ParseInPlace(wire) : handler.ParseCopy(wire)) return absl::OkStatus();
  google::protobuf::MessageLite& message = *handler.incoming();
  if (wire.size() >= kCountFieldsFromBytes) {
    CodedInputStream in(reinterpret_cast<const uint8_t*>(wire.data()),
                        static_cast<int>(wire.size()));
    if (absl::Status s = CheckRequestFields(message, in, limits); !s.ok()) return s;
  }
  if (!message.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return CannotParse(message);
  }
  return absl::OkStatus();
}

}  // namespace ringkv
