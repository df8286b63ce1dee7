#include "net/grpc_wire.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace ringkv {

std::optional<int64_t> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t digits = 0;
  for (char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    digits = digits * 10 + (c - '0');  // At most 8 digits: no overflow.
  }
  int64_t unit_ns;
  switch (value.back()) {
    case 'H':
      unit_ns = 3'600'000'000'000;
      break;
    case 'M':
      unit_ns = 60'000'000'000;
      break;
    case 'S':
      unit_ns = 1'000'000'000;
      break;
    case 'm':
      unit_ns = 1'000'000;
      break;
    case 'u':
      unit_ns = 1'000;
      break;
    case 'n':
      unit_ns = 1;
      break;
    default:
      return std::nullopt;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return digits > kMax / unit_ns ? kMax : digits * unit_ns;
}

std::string FormatGrpcTimeout(int64_t nanoseconds) {
  if (nanoseconds < 0) nanoseconds = 0;
  constexpr int64_t kMaxDigits = 99'999'999;
  struct Unit {
    int64_t ns;
    char name;
  };
  for (Unit unit : {Unit{1, 'n'}, Unit{1'000, 'u'}, Unit{1'000'000, 'm'}, Unit{1'000'000'000, 'S'},
                    Unit{60'000'000'000, 'M'}}) {
    // Round up, so that the deadline sent is never earlier than the caller's.
    const int64_t count = nanoseconds / unit.ns + (nanoseconds % unit.ns != 0);
    if (count <= kMaxDigits) return absl::StrCat(count, std::string(1, unit.name));
  }
  const int64_t hours = nanoseconds / 3'600'000'000'000 + 1;
  return absl::StrCat(hours > kMaxDigits ? kMaxDigits : hours, "H");
}

std::string PercentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b <= 0x7E && b != '%') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xF]);
    }
  }
  return out;
}

std::string PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace ringkv
