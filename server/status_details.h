// Status details: what gRPC's rich error model adds to a status. grpc-status-details-bin holds
// a google.rpc.Status (ringkv.v1.RpcStatus: the same fields) whose details are Any messages;
// inside the server they ride on the absl::Status as payloads (type URL -> serialized message),
// and each transport writes them out (StatusDetails). ringkv sends one so far: a refusal that
// ran nothing because this server is not the primary to run it (a replica's refusal of a
// write, a fenced group member's, a write short of replicas, a server shutting down) carries a
// ringkv.v1.Redirect naming the primary, if known (RefusalUnrun): a client may send the call
// again as it is.
#ifndef RINGKV_SERVER_STATUS_DETAILS_H_
#define RINGKV_SERVER_STATUS_DETAILS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ringkv {

inline constexpr std::string_view kRedirectTypeUrl = "type.googleapis.com/ringkv.v1.Redirect";

// UNAVAILABLE with `message`, and a Redirect to `primary` (empty: not known).
absl::Status RefusalUnrun(std::string_view message, std::string_view primary);

// The serialized RpcStatus of `status` with its payloads as details; empty if it has none (so
// nothing is sent).
std::string StatusDetails(const absl::Status& status);

}  // namespace ringkv

#endif  // RINGKV_SERVER_STATUS_DETAILS_H_
