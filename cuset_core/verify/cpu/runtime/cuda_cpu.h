// CuSeT CUDA-on-CPU runtime: runs CUDA kernels on the host, one user-space fiber per CUDA
// thread, the blocks of a grid in turn, on one OS thread.
//
// Scheduling, per block (see cuset::detail::run_block):
// - every fiber runs until it finishes or blocks; the launch's "schedule" decides the order
//   (0: ascending thread index, 1: descending, 2: odd lanes first), so a missing barrier shows
//   up as wrong values under at least one of the orders the harness tries;
// - the lanes a warp collective (__syncwarp, a shuffle, a vote) releases run on at once, before
//   the fibers after them in the order: a warp may run ahead of the others as on a GPU, so a read
//   of another warp's write with only a __syncwarp between them shows (ascending order: warp 0
//   reads before warp 1 has written);
// - when no fiber can run: fibers parked on a volatile access (warp-synchronous code) are
//   released first, then warp collectives that cannot fill up (lanes exited or diverged) are
//   completed with the lanes present, and last the __syncthreads barrier is released, which
//   counts only threads that have not exited (what GPUs do in practice).
//   So the scheduler never deadlocks; divergent barriers behave leniently.
// Uninitialised memory holds poison, as fresh GPU memory holds garbage: shared memory (static
// and dynamic) is filled with 0xFF bytes (NaN for floats, -1 for ints) at the start of every
// block, and so are cudaMalloc buffers and every CPU tensor allocated once the extension is
// loaded (torch::empty, torch.empty(..., device="cuda"), which is a CPU tensor here), so reading
// memory nobody wrote gives wrong values. (Tensors get their poison and guard pages from
// guarded_allocator.cpp, which the harness loads before the candidate runs.)
// Launches are checked as a GPU checks them (see cuset::launch): a launch that fails runs nothing
// and is not counted, and its reason stays pending until cudaGetLastError() consumes it.
// In the harness's kernels-off run (see cuset::detail::kernels_run) launches are checked and
// counted but run no blocks.
#ifndef CUSET_CUDA_CPU_H
#define CUSET_CUDA_CPU_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <string>
#include <type_traits>
#include <vector>
#include <math.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

// The hand-written x86-64 stack switch saves only callee-saved registers and never enters the
// kernel; elsewhere (or with -DCUSET_UCONTEXT) fibers use ucontext, whose swapcontext makes a
// sigprocmask system call per switch.
#if defined(__x86_64__) && !defined(CUSET_UCONTEXT)
#define CUSET_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#include "cuset_cuda_types.h"

// ---------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __constant__
#define __managed__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

namespace cuset {
namespace detail {

constexpr int kWarp = 32;
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kMaxDynamicShared = 228 * 1024;
// Dynamic shared memory a launch may ask for (sm_90): 48 KiB, or up to 227 KiB once the kernel
// opted in with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
constexpr size_t kDefaultDynamicShared = 48 * 1024;
constexpr size_t kOptinDynamicShared = 227 * 1024;
// The blocks' dynamic shared memory (they run one at a time), at an address fixed when the
// library is loaded: a file-scope ``extern __shared__`` becomes a pointer initialised with it,
// which the compiler initialises statically, since the device process runs no initialisers.
alignas(64) inline unsigned char dynamic_shared_storage[kMaxDynamicShared];

enum class State : unsigned char { runnable, barrier, soft, collective, done };
enum class Op : unsigned char { sync, shfl, up, down, bxor, ballot, any, all };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched out
  char* stack = nullptr;
  State state = State::runnable;
  unsigned index = 0;  // linear thread index in the block
  dim3 tid;
};

struct Warp {
  unsigned arrived = 0;  // lanes parked in the current collective
  unsigned wanted[kWarp] = {};
  Op op[kWarp] = {};
  int param[kWarp] = {};
  int width[kWarp] = {};
  unsigned char value[kWarp][16] = {};
  unsigned char result[kWarp][16] = {};
};

struct Runtime {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<unsigned> order;
  std::vector<unsigned> lane_order;  // the schedule's order of the lanes within a warp
  int released_warp = -1;  // a warp whose collective the running fiber completed, to run on now
  char* stacks = nullptr;
  size_t stack_count = 0;
  void* scheduler_sp = nullptr;
  Fiber* current = nullptr;
  void (*entry)(void*) = nullptr;
  void* entry_arg = nullptr;
  unsigned live = 0;
  unsigned long long block_serial = 0;
  int barrier_count = 0, barrier_or = 0, barrier_and = 1;
  int barrier_result_count = 0, barrier_result_or = 0, barrier_result_and = 1;
  size_t dynamic_bytes = 0;
  int schedule = 0;
  std::map<std::string, long> launches;
  std::map<std::string, size_t> shared_optin;  // kernel name -> its opted-in dynamic shared bytes
  std::string bounds_refusal;  // why the running launch exceeds its kernel's __launch_bounds__
  std::string report;
#if !defined(CUSET_ASM_SWITCH)
  std::vector<ucontext_t> contexts;
  ucontext_t scheduler_context;
#endif
};

inline Runtime& rt() {
  static Runtime* instance = new Runtime();  // never freed: kernels may run at exit
  return *instance;
}

}  // namespace detail
}  // namespace cuset

// Per-fiber built-ins: the scheduler writes them before switching into a fiber.
inline dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

// ---------------------------------------------------------------- context switch
#if defined(CUSET_ASM_SWITCH)
// cuset_swap(void** save_sp, void* next_sp): saves callee-saved registers, MXCSR and the x87
// control word on the current stack, stores rsp in *save_sp, switches to next_sp, restores.
// A fresh fiber's stack is laid out so that the final `ret` enters cuset_fiber_start, which
// calls r13(r12).
asm(R"(
.text
.weak cuset_swap
.type cuset_swap,@function
cuset_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size cuset_swap,.-cuset_swap
.weak cuset_fiber_start
.type cuset_fiber_start,@function
cuset_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size cuset_fiber_start,.-cuset_fiber_start
)");
extern "C" void cuset_swap(void** save_sp, void* next_sp);
extern "C" void cuset_fiber_start();
#endif

namespace cuset {
namespace detail {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "cuset runtime: %s\n", what);
  std::fflush(stderr);
  std::_Exit(86);
}

inline void fiber_main(void* arg) {
  Fiber* fiber = static_cast<Fiber*>(arg);
  Runtime& r = rt();
  r.entry(r.entry_arg);
  fiber->state = State::done;
  r.live -= 1;
#if defined(CUSET_ASM_SWITCH)
  void* dead;
  cuset_swap(&dead, r.scheduler_sp);
#else
  setcontext(&r.scheduler_context);
#endif
  fail("a finished fiber was resumed");
}

#if !defined(CUSET_ASM_SWITCH)
inline void fiber_main_trampoline() { fiber_main(rt().current); }
#endif

inline void ensure_stacks(size_t count) {
  Runtime& r = rt();
  if (r.stack_count >= count) return;
  if (r.stacks) munmap(r.stacks, r.stack_count * kStackBytes);
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* memory = mmap(nullptr, count * kStackBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) fail("cannot map fiber stacks");
  r.stacks = static_cast<char*>(memory);
  r.stack_count = count;
  for (size_t i = 0; i < count; ++i) mprotect(r.stacks + i * kStackBytes, page, PROT_NONE);
#if !defined(CUSET_ASM_SWITCH)
  r.contexts.resize(count);
#endif
}

inline void start_fiber(Fiber& fiber, size_t slot) {
  Runtime& r = rt();
  fiber.stack = r.stacks + slot * kStackBytes;
#if defined(CUSET_ASM_SWITCH)
  auto* top = reinterpret_cast<uint64_t*>(fiber.stack + kStackBytes);
  uint64_t* sp = top - 10;  // 8 saved words below 16-byte aligned top-16
  uint32_t mxcsr;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  sp[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(0x037F) << 32);
  sp[1] = 0;                                               // r15
  sp[2] = 0;                                               // r14
  sp[3] = reinterpret_cast<uint64_t>(&fiber_main);         // r13
  sp[4] = reinterpret_cast<uint64_t>(&fiber);              // r12
  sp[5] = 0;                                               // rbx
  sp[6] = 0;                                               // rbp
  sp[7] = reinterpret_cast<uint64_t>(&cuset_fiber_start);  // return address
  fiber.sp = sp;
#else
  ucontext_t& context = r.contexts[slot];
  getcontext(&context);
  context.uc_stack.ss_sp = fiber.stack;
  context.uc_stack.ss_size = kStackBytes;
  context.uc_link = nullptr;
  makecontext(&context, reinterpret_cast<void (*)()>(&fiber_main_trampoline), 0);
#endif
}

inline void switch_in(Fiber& fiber) {
  Runtime& r = rt();
  r.current = &fiber;
  threadIdx = fiber.tid;
#if defined(CUSET_ASM_SWITCH)
  cuset_swap(&r.scheduler_sp, fiber.sp);
#else
  swapcontext(&r.scheduler_context, &r.contexts[&fiber - r.fibers.data()]);
#endif
  r.current = nullptr;
}

// Park the current fiber in `state` and return to the scheduler.
inline void park(State state) {
  Runtime& r = rt();
  Fiber* fiber = r.current;
  if (!fiber) fail("a device barrier or warp operation ran outside a kernel");
  fiber->state = state;
  dim3 saved = fiber->tid;
#if defined(CUSET_ASM_SWITCH)
  cuset_swap(&fiber->sp, r.scheduler_sp);
#else
  swapcontext(&r.contexts[fiber - r.fibers.data()], &r.scheduler_context);
#endif
  threadIdx = saved;
}

inline unsigned lane_of(const Fiber& f) { return f.index % kWarp; }

// Fills every lane's result of a warp collective from the lanes that arrived.
inline void complete_collective(unsigned warp_index) {
  Runtime& r = rt();
  Warp& w = r.warps[warp_index];
  unsigned base = warp_index * kWarp;
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    if (!(w.arrived >> lane & 1u)) continue;
    int width = w.width[lane] > 0 ? w.width[lane] : kWarp;
    int seg = static_cast<int>(lane) & ~(width - 1);
    int src = static_cast<int>(lane);
    switch (w.op[lane]) {
      case Op::shfl: src = seg + (w.param[lane] & (width - 1)); break;
      case Op::up: src = static_cast<int>(lane) - w.param[lane]; if (src < seg) src = lane; break;
      case Op::down: src = static_cast<int>(lane) + w.param[lane]; if (src >= seg + width) src = lane; break;
      case Op::bxor: src = static_cast<int>(lane) ^ w.param[lane]; if (src >= seg + width) src = lane; break;
      default: break;
    }
    if (w.op[lane] == Op::ballot || w.op[lane] == Op::any || w.op[lane] == Op::all) {
      unsigned ballot = 0;
      for (unsigned other = 0; other < kWarp; ++other) {
        int pred;
        std::memcpy(&pred, w.value[other], sizeof pred);
        if ((w.arrived >> other & 1u) && (w.wanted[lane] >> other & 1u) && pred) ballot |= 1u << other;
      }
      unsigned voters = w.arrived & w.wanted[lane];
      unsigned out = w.op[lane] == Op::ballot ? ballot
                     : w.op[lane] == Op::any  ? (ballot != 0)
                                              : (ballot == voters);
      std::memcpy(w.result[lane], &out, sizeof out);
      continue;
    }
    if (src < 0 || src >= kWarp || !(w.arrived >> src & 1u)) src = lane;
    std::memcpy(w.result[lane], w.value[src], 16);
  }
  for (unsigned lane = 0; lane < kWarp; ++lane)
    if (w.arrived >> lane & 1u) r.fibers[base + lane].state = State::runnable;
  w.arrived = 0;
}

// Lanes of warp `warp_index` that exist and have not exited.
inline unsigned live_lanes(unsigned warp_index) {
  Runtime& r = rt();
  unsigned mask = 0;
  unsigned base = warp_index * kWarp;
  for (unsigned lane = 0; lane < kWarp && base + lane < r.fibers.size(); ++lane)
    if (r.fibers[base + lane].state != State::done) mask |= 1u << lane;
  return mask;
}

template <class T>
inline T collective(unsigned mask, Op op, T value, int param, int width) {
  static_assert(sizeof(T) <= 16, "warp exchange of a type wider than 16 bytes");
  Runtime& r = rt();
  Fiber* fiber = r.current;
  if (!fiber) fail("a warp operation ran outside a kernel");
  unsigned warp_index = fiber->index / kWarp, lane = lane_of(*fiber);
  Warp& w = r.warps[warp_index];
  std::memset(w.value[lane], 0, 16);
  std::memcpy(w.value[lane], &value, sizeof(T));
  w.op[lane] = op;
  w.param[lane] = param;
  w.width[lane] = width;
  w.wanted[lane] = mask;
  w.arrived |= 1u << lane;
  unsigned needed = (mask | (1u << lane)) & live_lanes(warp_index);
  if ((w.arrived & needed) == needed) {
    fiber->state = State::collective;
    complete_collective(warp_index);
    fiber->state = State::runnable;
    r.released_warp = static_cast<int>(warp_index);
  } else {
    park(State::collective);
  }
  T out;
  std::memcpy(&out, w.result[lane], sizeof(T));
  return out;
}

// Runs the runnable lanes of the warps that collectives completed while fibers of them ran, in
// the schedule's lane order, until no collective completes: that warp goes on ahead of the rest.
inline void run_released_warps() {
  Runtime& r = rt();
  while (r.released_warp >= 0) {
    unsigned base = static_cast<unsigned>(r.released_warp) * kWarp;
    r.released_warp = -1;
    for (unsigned lane : r.lane_order) {
      if (base + lane >= r.fibers.size()) continue;
      Fiber& fiber = r.fibers[base + lane];
      if (fiber.state == State::runnable) switch_in(fiber);
    }
  }
}

// One pass of the scheduler over the block; returns whether any fiber ran.
inline bool run_round() {
  Runtime& r = rt();
  bool ran = false;
  for (unsigned index : r.order) {
    Fiber& fiber = r.fibers[index];
    if (fiber.state != State::runnable) continue;
    switch_in(fiber);
    ran = true;
    run_released_warps();
  }
  return ran;
}

inline bool release(State state) {
  Runtime& r = rt();
  bool any = false;
  for (Fiber& fiber : r.fibers)
    if (fiber.state == state) { fiber.state = State::runnable; any = true; }
  return any;
}

inline void release_barrier() {
  Runtime& r = rt();
  r.barrier_result_count = r.barrier_count;
  r.barrier_result_or = r.barrier_or;
  r.barrier_result_and = r.barrier_and;
  r.barrier_count = 0;
  r.barrier_or = 0;
  r.barrier_and = 1;
  release(State::barrier);
}

inline void make_order(unsigned count, int schedule) {
  Runtime& r = rt();
  r.order.resize(count);
  for (unsigned i = 0; i < count; ++i) r.order[i] = i;
  if (schedule % 3 == 1) std::reverse(r.order.begin(), r.order.end());
  if (schedule % 3 == 2)
    std::stable_partition(r.order.begin(), r.order.end(), [](unsigned i) { return i % 2 == 1; });
  r.lane_order.resize(kWarp);
  for (unsigned lane = 0; lane < kWarp; ++lane) r.lane_order[lane] = lane;
  if (schedule % 3 == 1) std::reverse(r.lane_order.begin(), r.lane_order.end());
  if (schedule % 3 == 2)
    std::stable_partition(r.lane_order.begin(), r.lane_order.end(), [](unsigned i) { return i % 2 == 1; });
}

inline void run_block(unsigned count) {
  Runtime& r = rt();
  r.block_serial += 1;
  std::memset(dynamic_shared_storage, 0xFF, std::min(r.dynamic_bytes + 64, kMaxDynamicShared));
  for (unsigned i = 0; i < count; ++i) {
    Fiber& fiber = r.fibers[i];
    fiber.state = State::runnable;
    fiber.index = i;
    fiber.tid = dim3(i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y));
    start_fiber(fiber, i);
  }
  for (Warp& w : r.warps) w.arrived = 0;
  r.released_warp = -1;
  r.live = count;
  r.barrier_count = 0;
  r.barrier_or = 0;
  r.barrier_and = 1;
  while (r.live > 0) {
    if (run_round()) continue;
    if (release(State::soft)) continue;
    bool completed = false;
    for (unsigned w = 0; w < r.warps.size(); ++w)
      if (r.warps[w].arrived) { complete_collective(w); completed = true; }
    if (completed) continue;
    release_barrier();
  }
}

// A launch the GPU would refuse: nothing runs, the error is the one CUDA reports, and the first
// reason stays pending (see cuset_launch_failure) until cudaGetLastError() consumes it.
inline void launch_failed(const char* name, cudaError_t error, const std::string& why) {
  std::string reason = std::string("kernel ") + name + " was not launched (" + cudaGetErrorString(error) + "): " + why;
  std::fprintf(stderr, "cuset runtime: %s\n", reason.c_str());
  cuset_last_error() = error;
  if (cuset_launch_failure().empty()) cuset_launch_failure() = reason;
}

// Tier 1's ptxas figures of a kernel (runtime/trial_switches.cpp; absent without tier 1's report).
extern "C" __attribute__((weak)) int cuset_kernel_resources(const char* name, int* registers, long* shared_bytes);

// Registers of a block (sm_90): each warp gets its threads' registers in units of 256, and a block
// may hold 65,536; a thread may use 255 at most.
constexpr unsigned long long kRegistersPerBlock = 65536;
inline unsigned long long block_registers(int registers, unsigned long long threads) {
  unsigned long long per_warp = (static_cast<unsigned long long>(registers) * kWarp + 255) / 256 * 256;
  return per_warp * ((threads + kWarp - 1) / kWarp);
}

// Why a GPU would refuse this launch configuration, or "" when it would run it. With tier 1's
// report of the kernel: its registers times the block's threads, and its static shared memory
// beside the dynamic.
inline std::string refused(const char* name, dim3 grid, dim3 block, size_t smem, cudaError_t& error) {
  char text[400];
  error = cudaErrorInvalidConfiguration;
  unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || 1ull * grid.x * grid.y * grid.z == 0) {
    std::snprintf(text, sizeof text, "empty grid or block (grid %ux%ux%u, block %ux%ux%u)", grid.x, grid.y, grid.z,
                  block.x, block.y, block.z);
    return text;
  }
  if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.y > 65535 || grid.z > 65535 ||
      grid.x > 2147483647u) {
    std::snprintf(text, sizeof text,
                  "block %ux%ux%u or grid %ux%ux%u exceeds the device's limits (1024 threads per block)", block.x,
                  block.y, block.z, grid.x, grid.y, grid.z);
    return text;
  }
  int registers = 0;
  long static_bytes = 0;
  bool reported = cuset_kernel_resources && cuset_kernel_resources(name, &registers, &static_bytes);
  if (reported && block_registers(registers, threads) > kRegistersPerBlock) {
    error = cudaErrorLaunchOutOfResources;
    std::snprintf(text, sizeof text,
                  "%d registers per thread (tier 1's ptxas report) x %llu threads per block need %llu registers, "
                  "more than the 65536 a block may hold",
                  registers, threads, block_registers(registers, threads));
    return text;
  }
  Runtime& r = rt();
  auto optin = r.shared_optin.find(name);
  size_t allowed = optin == r.shared_optin.end() ? kDefaultDynamicShared : optin->second;
  size_t static_shared = reported && static_bytes > 0 ? static_cast<size_t>(static_bytes) : 0;
  if (smem > allowed) {
    error = cudaErrorInvalidValue;
    std::snprintf(text, sizeof text,
                  "%zu bytes of dynamic shared memory, more than the %zu bytes it may use (48 KiB unless the kernel "
                  "opts in with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "
                  "up to 227 KiB)",
                  smem, allowed);
    return text;
  }
  size_t limit = optin == r.shared_optin.end() ? kDefaultDynamicShared : kOptinDynamicShared;
  if (static_shared + smem > limit) {
    error = cudaErrorInvalidValue;
    std::snprintf(text, sizeof text,
                  "%zu bytes of static shared memory (tier 1's ptxas report) and %zu of dynamic, more than the %zu "
                  "bytes a block may use (48 KiB unless the kernel opts in with cudaFuncSetAttribute(kernel, "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), up to 227 KiB)",
                  static_shared, smem, limit);
    return text;
  }
  return "";
}

// Whether launches run their kernels, and the fiber schedule of this trial: switches the harness
// sets between runs in the trusted runtime library (runtime/trial_switches.cpp), never in
// anything the candidate's code can read. After its trials the harness runs trial 1 again with
// the kernels off: an output that still matches the reference did not come from the device
// code. Without the library (an extension loaded outside the harness) kernels run, schedule 0.
extern "C" __attribute__((weak)) int cuset_kernels_on();
extern "C" __attribute__((weak)) int cuset_schedule();
inline bool kernels_run() { return !cuset_kernels_on || cuset_kernels_on(); }
inline int trial_schedule() { return cuset_schedule ? cuset_schedule() : 0; }

}  // namespace detail

// cudaFuncSetAttribute for the kernel called `name` (the rewrite adds the name): records the
// dynamic shared memory opt-in that later launches of that kernel are checked against.
template <class F, class V>
inline cudaError_t func_set_attribute(const char* name, F function, cudaFuncAttribute attribute, V value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) > detail::kOptinDynamicShared) {
    cuset_last_error() = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  if (cuset_remote()) {  // the launches it applies to run in the device process
    return static_cast<cudaError_t>(
        cuset_port_attribute(reinterpret_cast<const void*>(function), name, static_cast<long>(value)));
  }
  detail::rt().shared_optin[name] = static_cast<size_t>(value);
  return cudaSuccess;
}

namespace detail {
template <class Body, class... A>
void remote_entry(const void* bound, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  size_t smem, const char* name);
}  // namespace detail

extern "C" __attribute__((weak)) int cuset_port_launch(const void* entry, const void* args, size_t args_len,
                                                       const size_t* offsets, size_t count, unsigned gx, unsigned gy,
                                                       unsigned gz, unsigned bx, unsigned by, unsigned bz, size_t smem,
                                                       const char* name, unsigned long long stream, int nonblocking);

// Launches a grid of `grid` x `block` threads with `smem` bytes of dynamic shared memory on `stream`:
// every thread calls `body(args...)`, which calls the kernel. The arguments are evaluated
// and copied once, at launch, as CUDA does. Counts the launch under `name`; a configuration a
// GPU would refuse runs nothing and is not counted (see detail::refused). With the kernels off
// (detail::kernels_run) a launch is checked and counted the same way, then runs no block.
// Behind the device boundary (cuset_remote(): the candidate's host process) the launch goes to the
// device process instead, as the launch site's remote_entry and the bound arguments' bytes; the
// device process runs that entry of its own copy of the library, which launches there when the
// stream's order allows (cpu/device/streams.py). In one process the stream is not modelled.
template <class Body, class... Args>
void launch(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Body body, Args&&... args) {
  using namespace detail;
  if (cuset_remote()) {
    std::tuple<Body, std::decay_t<Args>...> bound(body, std::forward<Args>(args)...);
    auto entry = &remote_entry<Body, std::decay_t<Args>...>;
    size_t offsets[sizeof...(Args) + 1] = {};  // where each argument lies in `bound`
    // What is sent: each argument's own bytes at its place, zeros between them. The padding beside
    // an int is whatever the compiler's stores left there (an old stack address's upper half, say),
    // which the device process would read as part of a word that may look like a host address
    // (containment.host_words) and refuse an honest launch.
    unsigned char image[sizeof bound] = {};
    std::apply(
        [&](Body&, auto&... a) {
          [[maybe_unused]] size_t i = 0;
          ((offsets[i] = reinterpret_cast<char*>(&a) - reinterpret_cast<char*>(&bound),
            std::memcpy(image + offsets[i], &a, sizeof a), ++i),
           ...);
        },
        bound);
    cuset_port_launch(reinterpret_cast<const void*>(entry), image, sizeof image, offsets, sizeof...(Args), grid.x,
                      grid.y, grid.z, block.x, block.y, block.z, smem, name, cuset_stream_id(stream),
                      cuset_stream_nonblocking(stream));
    return;
  }
  Runtime& r = rt();
  cudaError_t error;
  std::string why = refused(name, grid, block, smem, error);
  if (!why.empty()) {
    launch_failed(name, error, why);
    return;
  }
  if (r.current) fail("dynamic parallelism (a launch inside a kernel) is not supported");
  r.launches[name] += 1;
  if (!kernels_run()) return;
  unsigned long long threads = 1ull * block.x * block.y * block.z;
  std::tuple<std::decay_t<Args>...> bound(std::forward<Args>(args)...);
  auto call = [&]() { std::apply(body, bound); };
  using Call = decltype(call);
  r.entry = [](void* f) { (*static_cast<Call*>(f))(); };
  r.entry_arg = &call;
  r.dynamic_bytes = smem;
  ensure_stacks(threads);
  r.fibers.resize(threads);
  r.warps.assign((threads + kWarp - 1) / kWarp, Warp());
  make_order(static_cast<unsigned>(threads), trial_schedule());
  dim3 saved_grid = gridDim, saved_block = blockDim;
  gridDim = grid;
  blockDim = block;
  r.bounds_refusal.clear();
  for (unsigned z = 0; z < grid.z && r.bounds_refusal.empty(); ++z)
    for (unsigned y = 0; y < grid.y && r.bounds_refusal.empty(); ++y)
      for (unsigned x = 0; x < grid.x && r.bounds_refusal.empty(); ++x) {
        blockIdx = dim3(x, y, z);
        run_block(static_cast<unsigned>(threads));
      }
  gridDim = saved_grid;
  blockDim = saved_block;
  if (!r.bounds_refusal.empty()) {  // every thread returned at the kernel's first statement
    if (--r.launches[name] == 0) r.launches.erase(name);
    launch_failed(name, cudaErrorLaunchOutOfResources, r.bounds_refusal);
    r.bounds_refusal.clear();
  }
}

// The first statement of a kernel declared with __launch_bounds__(max_threads, ...) (the rewrite
// adds `if (cuset::launch_bounded(max_threads)) return;`, where the kernel's template arguments
// and macros are in scope): a block of more threads is a launch a GPU refuses ("too many resources
// requested for launch"), so every thread returns before doing anything and the launch fails.
inline bool launch_bounded(long long max_threads) {
  detail::Runtime& r = detail::rt();
  if (!r.current) return false;
  unsigned long long threads = 1ull * blockDim.x * blockDim.y * blockDim.z;
  if (max_threads <= 0 || threads <= static_cast<unsigned long long>(max_threads)) return false;
  if (r.bounds_refusal.empty())
    r.bounds_refusal = "a block of " + std::to_string(threads) + " threads, more than its __launch_bounds__(" +
                       std::to_string(max_threads) + ")";
  return true;
}

namespace detail {
// The device process's side of a launch from the host (see launch): the bound arguments' bytes
// back into the launch site's types, then the launch itself, here.
template <class Body, class... A>
void remote_entry(const void* bound, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                  size_t smem, const char* name) {
  using Bound = std::tuple<Body, A...>;
  alignas(Bound) unsigned char storage[sizeof(Bound)];
  std::memcpy(storage, bound, sizeof(Bound));
  Bound& values = *reinterpret_cast<Bound*>(storage);
  std::apply([&](Body& body, A&... a) { launch(name, dim3(gx, gy, gz), dim3(bx, by, bz), smem, nullptr, body, a...); },
             values);
}
}  // namespace detail

// Fills a static __shared__ variable with 0xFF once per block: the first thread of a block
// to reach its declaration does it, before any thread of that block can write it.
inline void poison_shared(void* address, size_t bytes, unsigned long long& seen) {
  unsigned long long serial = detail::rt().block_serial;
  if (seen != serial) {
    seen = serial;
    std::memset(address, 0xFF, bytes);
  }
}

}  // namespace cuset

namespace cuset {
namespace detail {

inline void on_fault(int, siginfo_t* info, void*) {
  Runtime& r = rt();
  const char* message =
      r.current ? "cuset runtime: invalid memory access (segmentation fault) in a kernel: an index runs outside its tensor or buffer\n"
      : cuset_remote_address(info ? info->si_addr : nullptr)
          ? "cuset runtime: host code read or wrote device memory (a GPU faults there too): device memory is reached only by kernels and copies\n"
          : "cuset runtime: invalid memory access (segmentation fault) in host code\n";
  ssize_t ignored = write(2, message, std::strlen(message));
  (void)ignored;
  _exit(87);
}

}  // namespace detail

// A kernel loaded or stored a whole vector at an address its type's alignment does not divide
// (cuset::VectorAccess): a GPU aborts the kernel with "misaligned address", and so does this, as
// on_fault does for an invalid address. Host code on the host's memory is not a GPU's to refuse.
inline void misaligned_vector(const void* address, std::size_t alignment, const char* type) {
  if (!detail::rt().current) return;
  std::fprintf(stderr,
               "cuset runtime: misaligned address (cudaErrorMisalignedAddress) in a kernel: a %s loaded or stored at "
               "%p, which is not a multiple of its %zu-byte alignment\n",
               type, address, alignment);
  std::fflush(stderr);
  _exit(87);
}

namespace detail {

// Runs once when the extension is loaded.
inline int install() {
  static char alternate_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alternate_stack;
  ss.ss_size = sizeof alternate_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction action {};
  action.sa_sigaction = &on_fault;
  action.sa_flags = SA_ONSTACK | SA_SIGINFO;
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
  return 0;
}
inline int installed = install();

}  // namespace detail
}  // namespace cuset

// The device process's cudaGetLastError (take) or cudaPeekAtLastError for the host: the launch
// errors of this library's launches.
extern "C" __attribute__((visibility("default"), weak, used)) int cuset_launch_error(int take) {
  cudaError_t e = cuset_last_error();
  if (take) {
    cuset_last_error() = cudaSuccess;
    cuset_launch_failure().clear();
  }
  return static_cast<int>(e);
}

// The device process's side of cudaFuncSetAttribute from the host: the dynamic shared memory
// opt-in of the kernel called `name`, which this library's launches are checked against.
extern "C" __attribute__((visibility("default"), weak, used)) void cuset_set_shared_optin(const char* name, long value) {
  cuset::detail::rt().shared_optin[name] = static_cast<size_t>(value);
}

// What the extension's load would have installed: the device process loads the library without
// running its initialisers (the candidate's host code), and installs this itself.
extern "C" __attribute__((visibility("default"), weak, used)) void cuset_install_fault_handler() {
  cuset::detail::install();
}

// The pending reason of a failed launch nobody checked with cudaGetLastError(), or "".
extern "C" __attribute__((visibility("default"), weak, used)) const char* cuset_launch_failure_reason() {
  return cuset_launch_failure().c_str();
}

extern "C" __attribute__((visibility("default"), weak, used)) const char* cuset_launch_report() {
  auto& r = cuset::detail::rt();
  r.report = "{";
  bool first = true;
  for (auto& [name, count] : r.launches) {
    r.report += (first ? "\"" : ", \"") + name + "\": " + std::to_string(count);
    first = false;
  }
  r.report += "}";
  return r.report.c_str();
}

// ---------------------------------------------------------------- barriers and warp ops
// barrier_count/or/and accumulate the predicates of the threads arriving at a barrier.
inline int cuset_barrier(int pred) {
  auto& r = cuset::detail::rt();
  r.barrier_count += pred != 0;
  r.barrier_or |= pred != 0;
  r.barrier_and &= pred != 0;
  cuset::detail::park(cuset::detail::State::barrier);
  return r.barrier_result_count;
}
inline void __syncthreads() { cuset_barrier(1); }
inline int __syncthreads_count(int pred) { return cuset_barrier(pred); }
inline int __syncthreads_or(int pred) { cuset_barrier(pred); return cuset::detail::rt().barrier_result_or; }
inline int __syncthreads_and(int pred) { cuset_barrier(pred); return cuset::detail::rt().barrier_result_and; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  cuset::detail::collective<int>(mask, cuset::detail::Op::sync, 0, 0, 32);
}
inline unsigned __activemask() { return cuset::detail::live_lanes(cuset::detail::rt().current->index / 32); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return cuset::detail::collective<T>(mask, cuset::detail::Op::shfl, v, src, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cuset::detail::collective<T>(mask, cuset::detail::Op::up, v, static_cast<int>(delta), width);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cuset::detail::collective<T>(mask, cuset::detail::Op::down, v, static_cast<int>(delta), width);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return cuset::detail::collective<T>(mask, cuset::detail::Op::bxor, v, lane_mask, width);
}
template <class T> inline T __shfl(T v, int src, int width = 32) { return __shfl_sync(0xffffffffu, v, src, width); }
template <class T> inline T __shfl_up(T v, unsigned d, int width = 32) { return __shfl_up_sync(0xffffffffu, v, d, width); }
template <class T> inline T __shfl_down(T v, unsigned d, int width = 32) { return __shfl_down_sync(0xffffffffu, v, d, width); }
template <class T> inline T __shfl_xor(T v, int m, int width = 32) { return __shfl_xor_sync(0xffffffffu, v, m, width); }
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return cuset::detail::collective<unsigned>(mask, cuset::detail::Op::ballot, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred) {
  return cuset::detail::collective<unsigned>(mask, cuset::detail::Op::any, pred != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int pred) {
  return cuset::detail::collective<unsigned>(mask, cuset::detail::Op::all, pred != 0, 0, 32);
}
inline unsigned __ballot(int pred) { return __ballot_sync(0xffffffffu, pred); }

namespace cuset {
// A pointer to volatile memory, as warp-synchronous code uses it: every load and store is
// followed by a soft sync, so the lanes of a warp execute such statements in lockstep.
template <class T> struct VolatileRef {
  T* p;
  operator T() const { T v = *p; soft_sync(); return v; }
  VolatileRef& operator=(T v) { *p = v; soft_sync(); return *this; }
  VolatileRef& operator=(const VolatileRef& o) { return *this = static_cast<T>(o); }
  VolatileRef& operator+=(T v) { T c = *p; soft_sync(); *p = c + v; soft_sync(); return *this; }
  VolatileRef& operator-=(T v) { T c = *p; soft_sync(); *p = c - v; soft_sync(); return *this; }
  VolatileRef& operator*=(T v) { T c = *p; soft_sync(); *p = c * v; soft_sync(); return *this; }
  static void soft_sync() {
    if (detail::rt().current) detail::park(detail::State::soft);
  }
};
template <class T> struct VolatilePtr {
  T* p;
  VolatilePtr(T* q = nullptr) : p(q) {}
  VolatileRef<T> operator[](long i) const { return VolatileRef<T>{p + i}; }
  VolatileRef<T> operator*() const { return VolatileRef<T>{p}; }
  VolatilePtr operator+(long i) const { return VolatilePtr(p + i); }
  VolatilePtr operator-(long i) const { return VolatilePtr(p - i); }
  operator T*() const { return p; }
};

// A read-modify-write statement of device code (`a[i] += v`, `*p -= v`, `a[i]++`: the rewrite
// makes each a call of rmw). On a racing trial (an odd trial schedule) the thread loads, then
// every other thread of the block runs up to its own next such point or barrier, then it stores,
// as threads of a GPU may interleave: threads that update one element of shared or global memory
// without an atomic lose updates, as they do on a GPU. Memory of the thread's own (its fiber's
// stack: local arrays) is never raced; atomics stay whole. Blocks still run one after another,
// so a race between blocks does not show.
namespace detail {
inline bool racing_trial() { return trial_schedule() % 2 == 1; }
inline void race_point(const void* address) {
  Runtime& r = rt();
  Fiber* fiber = r.current;
  if (!fiber || !racing_trial()) return;
  const char* at = static_cast<const char*>(address);
  if (at >= fiber->stack && at < fiber->stack + kStackBytes) return;
  park(State::soft);
}
}  // namespace detail

template <class T, class V, class F> inline void rmw(T& target, V&& value, F update) {
  T copy = target;
  detail::race_point(&target);
  update(copy, std::forward<V>(value));
  target = copy;
}
// Volatile elements already load, wait for the warp, then store (VolatileRef).
template <class T, class V, class F> inline void rmw(VolatileRef<T> target, V&& value, F update) {
  T copy = target;
  update(copy, std::forward<V>(value));
  target = copy;
}
}  // namespace cuset

// ---------------------------------------------------------------- atomics (one OS thread)
template <class T, class U> inline T atomicAdd(T* a, U v) { T old = *a; *a = static_cast<T>(old + v); return old; }
template <class T, class U> inline T atomicSub(T* a, U v) { T old = *a; *a = static_cast<T>(old - v); return old; }
template <class T, class U> inline T atomicExch(T* a, U v) { T old = *a; *a = static_cast<T>(v); return old; }
template <class T, class U> inline T atomicMax(T* a, U v) { T old = *a; if (static_cast<T>(v) > old) *a = static_cast<T>(v); return old; }
template <class T, class U> inline T atomicMin(T* a, U v) { T old = *a; if (static_cast<T>(v) < old) *a = static_cast<T>(v); return old; }
template <class T, class U> inline T atomicAnd(T* a, U v) { T old = *a; *a = old & static_cast<T>(v); return old; }
template <class T, class U> inline T atomicOr(T* a, U v) { T old = *a; *a = old | static_cast<T>(v); return old; }
template <class T, class U> inline T atomicXor(T* a, U v) { T old = *a; *a = old ^ static_cast<T>(v); return old; }
template <class T, class U, class V> inline T atomicCAS(T* a, U compare, V v) {
  T old = *a;
  if (old == static_cast<T>(compare)) *a = static_cast<T>(v);
  return old;
}
inline unsigned atomicInc(unsigned* a, unsigned limit) { unsigned old = *a; *a = old >= limit ? 0 : old + 1; return old; }
inline unsigned atomicDec(unsigned* a, unsigned limit) { unsigned old = *a; *a = (old == 0 || old > limit) ? limit : old - 1; return old; }
// Functions, not macros, as in CUDA: a candidate's `#ifdef` on them sees what nvcc sees.
template <class T, class U> inline T atomicAdd_block(T* a, U v) { return atomicAdd(a, v); }
template <class T, class U> inline T atomicAdd_system(T* a, U v) { return atomicAdd(a, v); }

// ---------------------------------------------------------------- math and bit intrinsics
template <class A, class B> inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B> inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float saturate(float x) { return __saturatef(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float normcdff(float x) { return 0.5f * erfcf(-x / sqrtf(2.0f)); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rd(float x) { return static_cast<int>(floorf(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(ceilf(x)); }
inline unsigned __float2uint_rn(float x) { return static_cast<unsigned>(nearbyintf(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return static_cast<int>((1ll * a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((1ull * a * b) >> 32); }
inline int __sad(int a, int b, unsigned c) { return (a > b ? a - b : b - a) + static_cast<int>(c); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
inline long long clock64() { return 0; }

inline unsigned __nanosleep(unsigned) { return 0; }
inline void __trap() { cuset::detail::fail("__trap() called in a kernel"); }

// ---------------------------------------------------------------- torch binding helpers
#include "cuset_cuda_torch.h"

#endif  // CUSET_CUDA_CPU_H
