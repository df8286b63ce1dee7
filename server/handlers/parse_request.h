// ParseRequest: a request message's bytes into its handler, as every transport takes them: the
// handler's own parser first (Handler::ParseInPlace where the bytes stay, ParseCopy where they
// do not), else protobuf into incoming(), once a message of 4 KiB or more is known to hold no
// more fields than MaxRequestFields. Protobuf makes an object of every field it parses, an
// unknown one too (kept in the message's UnknownFieldSet): a GET of 8 MiB of empty unknown
// fields took the server 213 MiB while it was parsed.
//
//   if (absl::Status s = ParseRequest(*handler, message, stays, limits); !s.ok()) Fail(s);
#ifndef RINGKV_SERVER_HANDLERS_PARSE_REQUEST_H_
#define RINGKV_SERVER_HANDLERS_PARSE_REQUEST_H_

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>

#include <cstddef>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "server/handlers/handler.h"
#include "server/request_limits.h"

namespace ringkv {

// Messages under this many bytes are parsed with no count first: protobuf makes at most a few
// dozen times their size of them.
inline constexpr size_t kCountFieldsFromBytes = 4096;

// The most fields a request message left to protobuf may hold, at any depth: 16 for each of
// --max-batch-items (a Stream op with every field and a condition makes 9), and 1024 more.
size_t MaxRequestFields(const RequestLimits& limits);

// The fields protobuf would make of the message `in` reads, parsed as `type` (null: as an
// unknown group, whose fields are kept too): each field at any depth, a repeated field's items
// each, a nested message's own fields, an unknown field, a group's fields. It stops counting
// once `most` is passed (and returns most + 1). nullopt where the bytes do not parse; then
// protobuf is left to refuse them. It is more lenient than protobuf only where protobuf refuses
// the bytes anyway (a nested length past the input's end reads as that message's end). A
// packed repeated scalar counts as one field (no request message has one).
std::optional<size_t> CountMessageFields(const google::protobuf::Descriptor* type,
                                         google::protobuf::io::CodedInputStream& in, size_t most);

// INVALID_ARGUMENT naming the limit when the bytes `in` reads, parsed as `message`'s type, hold
// more than MaxRequestFields(limits) fields; OK otherwise, or if they do not parse.
absl::Status CheckRequestFields(const google::protobuf::MessageLite& message,
                                google::protobuf::io::CodedInputStream& in,
                                const RequestLimits& limits);

// The request message `wire` into `handler`: its own parser's, or protobuf's into incoming()
// after CheckRequestFields. `stays`: the bytes stay put until the handler finishes
// (ParseInPlace), else only until the OnMessage that follows returns (ParseCopy). INTERNAL if
// the bytes do not parse as the message.
absl::Status ParseRequest(Handler& handler, std::string_view wire, bool stays,
                          const RequestLimits& limits);

// The INTERNAL status for bytes that do not parse as `message`.
absl::Status CannotParse(const google::protobuf::MessageLite& message);

}  // namespace ringkv

#endif  // RINGKV_SERVER_HANDLERS_PARSE_REQUEST_H_
