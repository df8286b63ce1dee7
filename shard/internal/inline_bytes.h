// InlineBytes<kSize>: a byte string that occupies exactly kSize bytes, holding up to kSize - 1
// bytes inline and longer strings on the heap. It is the key and value type of a shard's map:
// with 32-byte keys and 16-byte values a slot is 48 bytes, a report-style key
// ("file.mdtest.12345678.12345678", 29 bytes) and an 8-byte value need no allocation, and a GET
// touches the slot alone instead of the slot plus a heap key.
//
// Layout: the last byte is the tag. Inline: tag = length (0 .. kSize-1), bytes from offset 0.
// Heap: tag = kHeapTag, a pointer at offset 0 and a 32-bit length at offset 8, so strings are
// under 4 GiB (the daemon's limits are far below).
// Not thread-safe; owned by whoever owns the map.
#ifndef RINGKV_SHARD_INTERNAL_INLINE_BYTES_H_
#define RINGKV_SHARD_INTERNAL_INLINE_BYTES_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string_view>

namespace ringkv::internal {

template <size_t kSize>
class InlineBytes {
  static_assert(kSize >= 13 && kSize <= 255, "needs room for a pointer, a length and a tag");

 public:
  static constexpr size_t kInlineMax = kSize - 1;

  InlineBytes() { buf_[kSize - 1] = 0; }
  explicit InlineBytes(std::string_view bytes) {
    buf_[kSize - 1] = 0;
    Assign(bytes);
  }
  InlineBytes(const InlineBytes& other) : InlineBytes(other.view()) {}
  InlineBytes(InlineBytes&& other) noexcept {
    std::memcpy(buf_, other.buf_, kSize);
    other.buf_[kSize - 1] = 0;
  }
  InlineBytes& operator=(const InlineBytes& other) {
    Assign(other.view());
    return *this;
  }
  InlineBytes& operator=(InlineBytes&& other) noexcept {
    if (this != &other) {
      FreeHeap();
      std::memcpy(buf_, other.buf_, kSize);
      other.buf_[kSize - 1] = 0;
    }
    return *this;
  }
  ~InlineBytes() { FreeHeap(); }

  // `bytes` may point into this object's own storage.
  void Assign(std::string_view bytes) {
    char* old_heap = on_heap() ? heap_ptr() : nullptr;
    if (bytes.size() > UINT32_MAX) throw std::length_error("InlineBytes holds under 4 GiB");
    if (bytes.size() <= kInlineMax) {
      std::memmove(buf_, bytes.data(), bytes.size());
      buf_[kSize - 1] = static_cast<char>(bytes.size());
    } else {
      char* p = static_cast<char*>(std::malloc(bytes.size()));
      if (p == nullptr) throw std::bad_alloc();
      std::memcpy(p, bytes.data(), bytes.size());
      const uint32_t size = static_cast<uint32_t>(bytes.size());
      std::memcpy(buf_, &p, sizeof(p));
      std::memcpy(buf_ + 8, &size, sizeof(size));
      buf_[kSize - 1] = static_cast<char>(kHeapTag);
    }
    std::free(old_heap);
  }

  std::string_view view() const {
    if (!on_heap()) return {buf_, static_cast<unsigned char>(buf_[kSize - 1])};
    uint32_t size;
    std::memcpy(&size, buf_ + 8, sizeof(size));
    return {heap_ptr(), size};
  }
  size_t size() const { return view().size(); }
  // Bytes allocated outside the object.
  size_t heap_bytes() const { return on_heap() ? view().size() : 0; }

 private:
  static constexpr unsigned char kHeapTag = 0xff;
  static_assert(kInlineMax < kHeapTag);

  bool on_heap() const { return static_cast<unsigned char>(buf_[kSize - 1]) == kHeapTag; }
  char* heap_ptr() const {
    char* p;
    std::memcpy(&p, buf_, sizeof(p));
    return p;
  }
  void FreeHeap() {
    if (on_heap()) std::free(heap_ptr());
  }

  alignas(8) char buf_[kSize];
};

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_INLINE_BYTES_H_
