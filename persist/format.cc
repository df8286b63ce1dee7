#include "persist/format.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "persist/block.h"

namespace ringkv::persist {
namespace {

constexpr std::string_view kHeaderMagic("RINGKV\0F", 8);
constexpr std::string_view kFooterMagic("RINGKV\0E", 8);
constexpr std::string_view kManifestMagic("RINGKV\0M", 8);

void PutFixed(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetFixed(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
  return v;
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
bool GetVarint(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    result |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return false;
}
bool GetBytes(std::string_view* in, std::string_view* bytes) {
  uint64_t n;
  if (!GetVarint(in, &n) || n > in->size()) return false;
  *bytes = in->substr(0, n);
  in->remove_prefix(n);
  return true;
}

void PutKey(std::string* out, RecordKind kind, std::string_view key) {
  out->push_back(static_cast<char>(kind));
  PutVarint(out, key.size());
  out->append(key);
}

// Name parts: "log-" or "snap-", 12 digits of generation, '-', 4 digits of shard, ".rkv".
bool ParseNumber(std::string_view text, uint64_t* v) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *v);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string EncodeHeader(const FileHeader& h) {
  std::string out(kHeaderMagic);
  out.push_back(static_cast<char>(h.kind));
  PutFixed(&out, h.format, 4);
  PutFixed(&out, h.generation, 8);
  PutFixed(&out, h.shard, 4);
  PutFixed(&out, h.shards, 4);
  PutFixed(&out, static_cast<uint64_t>(h.created_ms), 8);
  return out;
}

absl::Status DecodeHeader(std::string_view p, FileHeader* h) {
  if (p.size() < kHeaderMagic.size() + 5 || p.substr(0, kHeaderMagic.size()) != kHeaderMagic) {
    return absl::DataLossError("not a ringkv data file (no header)");
  }
  const char kind = p[kHeaderMagic.size()];
  if (kind != static_cast<char>(FileKind::kLog) && kind != static_cast<char>(FileKind::kSnapshot)) {
    return absl::DataLossError("unknown file kind in the header");
  }
  h->kind = static_cast<FileKind>(kind);
  h->format = static_cast<uint32_t>(GetFixed(p, kHeaderMagic.size() + 1, 4));
  if (h->format < kOldestFormatVersion || h->format > kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("written in format ", h->format, "; this ringkv-server reads formats ",
                     kOldestFormatVersion, " to ", kFormatVersion, " only"));
  }
  if (p.size() != kHeaderMagic.size() + 1 + 4 + 8 + 4 + 4 + 8) {
    return absl::DataLossError("header of the wrong size");
  }
  size_t at = kHeaderMagic.size() + 5;
  h->generation = GetFixed(p, at, 8);
  h->shard = static_cast<uint32_t>(GetFixed(p, at + 8, 4));
  h->shards = static_cast<uint32_t>(GetFixed(p, at + 12, 4));
  h->created_ms = static_cast<int64_t>(GetFixed(p, at + 16, 8));
  if (h->shards == 0 || h->shard >= h->shards) {
    return absl::DataLossError(absl::StrCat("header names shard ", h->shard, " of ", h->shards));
  }
  return absl::OkStatus();
}

uint32_t SeedOf(const FileHeader& h) {
  const uint64_t mix = (h.generation * 0x9E3779B97F4A7C15ull) ^ (uint64_t{h.shard} << 8) ^
                       static_cast<uint64_t>(h.kind);
  return static_cast<uint32_t>(mix ^ (mix >> 32)) | 1;  // Never 0, the headers' seed.
}

std::string LogName(uint64_t generation, uint32_t worker) {
  return absl::StrFormat("log-%012d-%04d.rkv", generation, worker);
}
std::string SnapshotName(uint64_t generation, uint32_t shard) {
  return absl::StrFormat("snap-%012d-%04d.rkv", generation, shard);
}

std::optional<ParsedName> ParseName(std::string_view name) {
  ParsedName parsed;
  if (name.starts_with("log-")) {
    parsed.kind = FileKind::kLog;
    name.remove_prefix(4);
  } else if (name.starts_with("snap-")) {
    parsed.kind = FileKind::kSnapshot;
    name.remove_prefix(5);
  } else {
    return std::nullopt;
  }
  if (name.size() != 12 + 1 + 4 + 4 || name[12] != '-' || !name.ends_with(".rkv")) {
    return std::nullopt;
  }
  uint64_t shard;
  if (!ParseNumber(name.substr(0, 12), &parsed.generation) ||
      !ParseNumber(name.substr(13, 4), &shard)) {
    return std::nullopt;
  }
  parsed.shard = static_cast<uint32_t>(shard);
  return parsed;
}

void AppendSet(std::string* out, std::string_view key, std::string_view value, uint64_t version,
               int64_t deadline_ms) {
  PutKey(out, RecordKind::kSet, key);
  PutVarint(out, version);
  PutVarint(out, static_cast<uint64_t>(deadline_ms));
  PutVarint(out, value.size());
  out->append(value);
}

void AppendDeadline(std::string* out, std::string_view key, int64_t deadline_ms) {
  PutKey(out, RecordKind::kDeadline, key);
  PutVarint(out, static_cast<uint64_t>(deadline_ms));
}

void AppendDelete(std::string* out, std::string_view key) { PutKey(out, RecordKind::kDelete, key); }

void AppendPosition(std::string* out, std::string_view history, uint64_t lsn, bool reset) {
  PutKey(out, RecordKind::kPosition, history);
  PutVarint(out, lsn);
  out->push_back(static_cast<char>(reset ? 1 : 0));
}

size_t MaxSetBytes(size_t key_bytes, size_t value_bytes) {
  return 1 + 10 + key_bytes + 10 + 10 + 10 + value_bytes;
}

bool RecordReader::Next(Record* r) {
  if (data_.empty()) return false;
  const uint8_t kind = static_cast<uint8_t>(data_.front());
  data_.remove_prefix(1);
  uint64_t v = 0;
  bool ok = GetBytes(&data_, &r->key);
  switch (static_cast<RecordKind>(kind)) {
    case RecordKind::kSet:
      r->kind = RecordKind::kSet;
      ok = ok && GetVarint(&data_, &r->version) && GetVarint(&data_, &v) &&
           GetBytes(&data_, &r->value);
      r->deadline_ms = static_cast<int64_t>(v);
      break;
    case RecordKind::kDeadline:
      r->kind = RecordKind::kDeadline;
      ok = ok && GetVarint(&data_, &v);
      r->deadline_ms = static_cast<int64_t>(v);
      break;
    case RecordKind::kDelete:
      r->kind = RecordKind::kDelete;
      break;
    case RecordKind::kPosition:
      r->kind = RecordKind::kPosition;
      ok = ok && GetVarint(&data_, &r->version) && !data_.empty() &&
           static_cast<uint8_t>(data_.front()) <= 1;
      if (ok) {
        r->reset = data_.front() == 1;
        data_.remove_prefix(1);
      }
      break;
    default:
      ok = false;
  }
  if (!ok || r->deadline_ms < 0) {
    malformed_ = true;
    data_ = {};
    return false;
  }
  return true;
}

std::string EncodeFooter(const SnapshotFooter& f) {
  std::string out(kFooterMagic);
  PutFixed(&out, f.records, 8);
  PutFixed(&out, f.data_blocks, 8);
  PutFixed(&out, f.revision, 8);
  if (!f.history.empty()) {
    PutFixed(&out, f.lsn, 8);
    out.append(f.history);
  }
  return out;
}

bool DecodeFooter(std::string_view p, SnapshotFooter* f) {
  // Format 1's footer has no revision.
  if (!p.starts_with(kFooterMagic)) return false;
  const size_t size = p.size() - kFooterMagic.size();
  // A replica's has its position after the revision: the lsn, then the history to its end.
  if (size != 16 && size != 24 && size <= 32) return false;
  f->records = GetFixed(p, 8, 8);
  f->data_blocks = GetFixed(p, 16, 8);
  f->revision = size >= 24 ? GetFixed(p, 24, 8) : 0;
  f->lsn = size > 32 ? GetFixed(p, 32, 8) : 0;
  f->history = size > 32 ? std::string(p.substr(40)) : std::string();
  return true;
}

std::string EncodeManifest(const Manifest& m) {
  std::string payload(kManifestMagic);
  PutFixed(&payload, kFormatVersion, 4);
  PutFixed(&payload, m.generation, 8);
  PutFixed(&payload, m.shards, 4);
  PutFixed(&payload, m.keys, 8);
  PutFixed(&payload, m.bytes, 8);
  PutFixed(&payload, static_cast<uint64_t>(m.created_ms), 8);
  PutFixed(&payload, m.logs.size(), 4);
  for (const LogEntry& log : m.logs) {
    PutFixed(&payload, log.generation, 8);
    PutFixed(&payload, log.worker, 4);
    PutFixed(&payload, log.workers, 4);
    PutFixed(&payload, log.intact_bytes, 8);
  }
  std::string out;
  AppendBlock(&out, 0, payload);
  return out;
}

absl::Status DecodeManifest(std::string_view file, Manifest* m) {
  BlockReader reader(file, 0);
  std::string_view p;
  if (!reader.Next(&p) || reader.offset() != file.size() || !p.starts_with(kManifestMagic) ||
      p.size() < 12) {
    return absl::DataLossError("the MANIFEST is damaged");
  }
  const uint32_t format = static_cast<uint32_t>(GetFixed(p, 8, 4));
  if (format < kOldestFormatVersion || format > kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("the MANIFEST is in format ", format, "; this ringkv-server reads formats ",
                     kOldestFormatVersion, " to ", kFormatVersion, " only"));
  }
  constexpr size_t kFixed = 8 + 4 + 8 + 4 + 8 + 8 + 8;
  constexpr size_t kLogEntry = 8 + 4 + 4 + 8;
  const auto damaged = [] { return absl::DataLossError("the MANIFEST is damaged"); };
  if (format == 1 ? p.size() != kFixed : p.size() < kFixed + 4) return damaged();
  m->generation = GetFixed(p, 12, 8);
  m->shards = static_cast<uint32_t>(GetFixed(p, 20, 4));
  m->keys = GetFixed(p, 24, 8);
  m->bytes = GetFixed(p, 32, 8);
  m->created_ms = static_cast<int64_t>(GetFixed(p, 40, 8));
  m->logs.clear();
  m->has_inventory = format >= 2;
  if (!m->has_inventory) return absl::OkStatus();
  const uint64_t count = GetFixed(p, kFixed, 4);
  if (p.size() != kFixed + 4 + count * kLogEntry) return damaged();
  for (size_t at = kFixed + 4; at < p.size(); at += kLogEntry) {
    LogEntry& log = m->logs.emplace_back();
    log.generation = GetFixed(p, at, 8);
    log.worker = static_cast<uint32_t>(GetFixed(p, at + 8, 4));
    log.workers = static_cast<uint32_t>(GetFixed(p, at + 12, 4));
    log.intact_bytes = GetFixed(p, at + 16, 8);
    if (log.workers == 0 || log.worker >= log.workers || log.generation < m->generation) {
      return damaged();
    }
  }
  return absl::OkStatus();
}

}  // namespace ringkv::persist
