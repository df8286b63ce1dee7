// HugePageAllocator: the shard map's allocator. Blocks of 2 MiB and more (a big table's slot
// array) are mapped on their own, 2 MiB-aligned, and marked MADV_HUGEPAGE, so the kernel backs
// them with transparent huge pages where it can: a first touch faults in 2 MiB instead of 4 KiB
// (512 times fewer page faults while a table fills) and a random probe misses the TLB far less.
// The block is then pre-faulted (MADV_POPULATE_WRITE, or a write per page on kernels without
// it), so the kernel's page zeroing is paid when the table is allocated (a reserve at start-up,
// or a rebuild that rewrites every slot anyway), not on the inserts that first touch each page.
// A table's growth asks for neither (huge false: 4 KiB pages, faulted in on first touch): its
// steps touch the array a little at a time, and a fault must stay short. A 2 MiB fault took 4.5 ms
// on this project's VMs (the kernel zeroes, the hypervisor backs it), 4 KiB ones take microseconds.
// A grown array stays on 4 KiB pages: marking it for khugepaged afterwards made GETs wait up to 36
// ms while it collapsed the pages (it holds the address space's lock, and the worker's own faults
// wait). Smaller blocks go to malloc (jemalloc). Stateless; any thread.
#ifndef RINGKV_SHARD_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
#define RINGKV_SHARD_INTERNAL_HUGE_PAGE_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

// LeakSanitizer's (null outside sanitizer builds): it scans the heap, stacks and globals for
// pointers, not mappings of our own, so a table's heap blocks would look leaked without these.
// NOLINTNEXTLINE(readability-identifier-naming): LeakSanitizer names them.
extern "C" void __lsan_register_root_region(const void* p, size_t size) __attribute__((weak));
// NOLINTNEXTLINE(readability-identifier-naming)
extern "C" void __lsan_unregister_root_region(const void* p, size_t size) __attribute__((weak));

namespace ringkv::internal {

inline constexpr size_t kHugePage = size_t{2} << 20;

inline void* AllocateHuge(size_t bytes, bool huge = true) {
  const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Map one huge page more than needed and trim, so the block starts on a 2 MiB boundary.
  void* raw = mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + length + kHugePage;
  if (end > aligned + length)
    munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  void* block = reinterpret_cast<void*>(aligned);
  if (huge) {
    madvise(block, length, MADV_HUGEPAGE);  // Advice: failure is fine.
    if (madvise(block, length, MADV_POPULATE_WRITE) != 0) {
      for (size_t offset = 0; offset < length; offset += 4096) {
        static_cast<volatile char*>(block)[offset] = 0;
      }
    }
  }
  if (&__lsan_register_root_region != nullptr) __lsan_register_root_region(block, length);
  return block;
}

inline void FreeHuge(void* p, size_t bytes) {
  const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (&__lsan_unregister_root_region != nullptr) __lsan_unregister_root_region(p, length);
  munmap(p, length);
}

template <typename T>
struct HugePageAllocator {
  using value_type = T;  // NOLINT(readability-identifier-naming): the allocator concept's.

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: allocators convert implicitly.

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePage) return static_cast<T*>(AllocateHuge(bytes));
    void* p = std::malloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes >= kHugePage) {
      FreeHuge(p, bytes);
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_HUGE_PAGE_ALLOCATOR_H_
