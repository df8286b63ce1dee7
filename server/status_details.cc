#include "server/status_details.h"

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "ringkv/v1/kv.pb.h"

namespace ringkv {

absl::Status RefusalUnrun(std::string_view message, std::string_view primary) {
  absl::Status status = absl::UnavailableError(absl::string_view(message.data(), message.size()));
  ringkv::v1::Redirect redirect;
  redirect.set_primary(std::string(primary));
  status.SetPayload(absl::string_view(kRedirectTypeUrl.data(), kRedirectTypeUrl.size()),
                    absl::Cord(redirect.SerializeAsString()));
  return status;
}

std::string StatusDetails(const absl::Status& status) {
  ringkv::v1::RpcStatus out;
  status.ForEachPayload([&out](absl::string_view type_url, const absl::Cord& value) {
    ringkv::v1::AnyDetail* detail = out.add_details();
    detail->set_type_url(std::string(type_url.data(), type_url.size()));
    detail->set_value(std::string(value));
  });
  if (out.details().empty()) return {};
  out.set_code(static_cast<int>(status.code()));
  out.set_message(std::string(status.message()));
  return out.SerializeAsString();
}

}  // namespace ringkv
