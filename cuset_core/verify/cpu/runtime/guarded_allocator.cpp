// The CPU allocator of tier 2's candidate process. The harness loads this library (built once
// per toolchain by the trusted side, beside the precompiled preludes) before it builds or runs
// the candidate, so every extension, whatever prelude built it, works on guarded, poisoned tensors.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

namespace {

// Every CPU tensor allocated once this library is loaded (inputs and outputs included) ends
// 16-byte aligned right before a PROT_NONE page, so a kernel that runs past the end of a
// tensor faults instead of silently corrupting the heap. Layout: [data pages][guard page];
// torch's raw_allocate needs the context to be the data pointer, so mappings are kept in a
// table keyed by it.
struct GuardedAllocator final : c10::Allocator {
  static constexpr size_t kAlign = 16;
  static std::mutex& lock() { static std::mutex m; return m; }
  static std::unordered_map<void*, std::pair<void*, size_t>>& mappings() {
    static auto* table = new std::unordered_map<void*, std::pair<void*, size_t>>();
    return *table;
  }
  c10::DataPtr allocate(size_t bytes) override {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t data = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    size_t body = (data + page - 1) / page * page;
    size_t total = body + page;
    void* memory = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    char* base = static_cast<char*>(memory);
    mprotect(base + body, page, PROT_NONE);
    void* ptr = base + body - data;
    // Poison: an empty tensor is garbage on a GPU, not zeros (what fresh pages hold); zeros,
    // ones, full and copies overwrite it.
    std::memset(ptr, 0xFF, data);
    {
      std::lock_guard<std::mutex> guard(lock());
      mappings()[ptr] = {base, total};
    }
    return {ptr, ptr, &release, c10::Device(c10::DeviceType::CPU)};
  }
  static void release(void* ptr) {
    std::pair<void*, size_t> mapping;
    {
      std::lock_guard<std::mutex> guard(lock());
      auto found = mappings().find(ptr);
      if (found == mappings().end()) return;
      mapping = found->second;
      mappings().erase(found);
    }
    munmap(mapping.first, mapping.second);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override { std::memcpy(dest, src, count); }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) void cuset_install_guarded_allocator() {
  static GuardedAllocator allocator;
  c10::SetCPUAllocator(&allocator, 100);
}
