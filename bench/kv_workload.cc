#include "bench/kv_workload.h"

#include <wyhash/wyhash.h>

#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringkv::bench {

namespace {
constexpr std::string_view kPrefix = "file.mdtest.";

size_t Digits(uint64_t v) {
  size_t d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

uint64_t Encode(uint32_t thread, uint64_t index) { return (uint64_t{thread} << 40) | index; }
}  // namespace

size_t KeyArena::MaxKeyBytes(uint64_t range) { return kPrefix.size() + 2 * Digits(range) + 1; }

KeyArena::KeyArena(uint64_t count, uint64_t range, uint64_t seed)
    : count_(count), stride_(1 + MaxKeyBytes(range)) {
  data_.reset(new char[count_ * stride_]);
  uint64_t rng = seed;
  for (uint64_t i = 0; i < count_; ++i) {
    char* p = data_.get() + i * stride_;
    char* out = p + 1;
    std::memcpy(out, kPrefix.data(), kPrefix.size());
    out += kPrefix.size();
    const uint64_t a = 1 + wyrand(&rng) % range;
    const uint64_t b = 1 + wyrand(&rng) % range;
    out = std::to_chars(out, p + stride_, a).ptr;
    *out++ = '.';
    out = std::to_chars(out, p + stride_, b).ptr;
    p[0] = static_cast<char>(out - (p + 1));
  }
}

KvSource::KvSource(uint32_t thread, const std::vector<std::unique_ptr<KeyArena>>& arenas)
    : thread_(thread), arenas_(arenas), pool_(kPoolSize) {
  free_.reserve(kPoolSize);
  for (Slot& s : pool_) free_.push_back(&s);
}

void KvSource::StartPhase(Op op) {
  arena_ = arenas_[thread_].get();
  op_ = op;
  next_ = 0;
  completed_local_ = 0;
  completed_.store(0, std::memory_order_relaxed);
}

size_t KvSource::Poll(Request** out, size_t max) {
  size_t n = 0;
  while (n < max && next_ < arena().size() && !free_.empty()) {
    Slot* s = free_.back();
    free_.pop_back();
    s->index = next_;
    s->request.op = op_;
    s->request.key = arena().key(next_);
    s->request.tag = s;
    if (op_ == Op::kPut) {
      const uint64_t v = Encode(thread_, next_);
      std::memcpy(s->value, &v, sizeof(v));
      s->request.value = {s->value, sizeof(v)};
    }
    out[n++] = &s->request;
    ++next_;
  }
  return n;
}

void KvSource::Complete(Request* request) {
  Slot* s = static_cast<Slot*>(request->tag);
  if (op_ == Op::kGet) Check(*s);
  ++completed_local_;
  completed_.store(completed_local_, std::memory_order_relaxed);
  free_.push_back(s);
}

void KvSource::Check(const Slot& slot) {
  const Request& r = slot.request;
  std::string problem;
  if (r.result != Result::kOk) {
    problem = "not found";
  } else if (r.out.size() != 8) {
    problem = absl::StrCat("value of ", r.out.size(), " bytes");
  } else {
    uint64_t v;
    std::memcpy(&v, r.out.data(), sizeof(v));
    const uint64_t writer = v >> 40;
    const uint64_t index = v & ((uint64_t{1} << 40) - 1);
    if (writer == thread_ && index == slot.index) return;  // The usual case: its own write.
    if (writer >= arenas_.size() || index >= arenas_[writer]->size() ||
        arenas_[writer]->key(index) != r.key) {
      problem = absl::StrCat("value written for another key (thread ", writer, ", op ", index, ")");
    } else if (writer == thread_ && index < slot.index) {
      problem = "an earlier write of the key, not the last";
    } else {
      return;  // The same key, written later by this thread or by another thread.
    }
  }
  if (errors_++ == 0) {
    first_error_ = absl::StrCat("GET ", std::string(r.key), " (thread ", thread_, ", op ",
                                slot.index, "): ", problem);
  }
}

}  // namespace ringkv::bench
