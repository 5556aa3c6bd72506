// The CPU allocator of tier 2's candidate process. The harness loads this library (built once
// per toolchain by the trusted side, beside the precompiled preludes) before it builds or runs
// the candidate, so every extension, whatever prelude built it, works on guarded, poisoned tensors.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <cstdint>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace {

// The device process's address range (tier 2's device boundary, cpu/device/): reserved before the
// candidate's host process is forked from it, so the host keeps the range mapped PROT_NONE and
// faults on any device address, as host code does on a GPU. With `on`, every allocation of the
// device process is placed in it.
struct Arena {
  char* base = nullptr;
  size_t size = 0;
  size_t next = 0;
  bool on = false;
  std::unordered_map<size_t, std::vector<char*>> free_blocks;  // released blocks by their size
};
Arena& arena() {
  static Arena a;
  return a;
}

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
    void* memory = place(total);
    // A full device range is a GPU's out-of-memory error (the candidate's), not the machine's.
    TORCH_CHECK(memory != MAP_FAILED || !arena().on,
                "cuset runtime: out of device memory: the CPU tier's device range of ", arena().size >> 20,
                " MiB is full");
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
  static void* place(size_t total) {
    Arena& a = arena();
    if (!a.on) return mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char* at;
    {
      std::lock_guard<std::mutex> guard(lock());
      auto& same = a.free_blocks[total];
      if (!same.empty()) {  // reused, as a GPU's allocator reuses freed memory
        at = same.back();
        same.pop_back();
      } else {
        if (a.next + total > a.size) return MAP_FAILED;
        at = a.base + a.next;
        a.next += total;
      }
    }
    return mmap(at, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
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
    char* start = static_cast<char*>(mapping.first);
    Arena& a = arena();
    if (a.base && start >= a.base && start < a.base + a.size) {  // back to reserved, never unmapped
      mmap(start, mapping.second, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
      std::lock_guard<std::mutex> guard(lock());
      if (start + mapping.second == a.base + a.next)
        a.next -= mapping.second;  // the last block placed: the range ends before it again
      else
        a.free_blocks[mapping.second].push_back(start);
    } else
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

// Reserves the device range (`bytes` of address space, nothing committed); returns its start.
extern "C" __attribute__((visibility("default"))) uintptr_t cuset_reserve_arena(size_t bytes) {
  Arena& a = arena();
  if (!a.base) {
    void* range = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) return 0;
    a.base = static_cast<char*>(range);
    a.size = bytes;
  }
  return reinterpret_cast<uintptr_t>(a.base);
}

// From now on every allocation of this process lands in the reserved range (the device process).
extern "C" __attribute__((visibility("default"))) void cuset_arena_allocate() { arena().on = true; }

// Whether `p` is a device address: in the reserved range.
extern "C" __attribute__((visibility("default"))) int cuset_arena_owns(const void* p) {
  const Arena& a = arena();
  const char* c = static_cast<const char*>(p);
  return a.base && c >= a.base && c < a.base + a.size;
}
