// CUDA runtime types and the host memory API of the CuSeT CPU runtime: device memory is host
// memory, copies are memcpy. Behind the device boundary the device process orders the work of
// streams and events as a GPU may (cpu/device/streams.py); in one process they are tokens.
#ifndef CUSET_CUSET_CUDA_TYPES_H
#define CUSET_CUSET_CUDA_TYPES_H

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

namespace cuset {
// A GPU loads and stores a vector type (float2, float4, int4, double2, ...) with one instruction that
// needs its address aligned to the type's alignment (its size, up to 16 bytes), and faults otherwise
// ("misaligned address"); x86 does not care. So each vector type of two or four elements ends with a
// member of no size whose copy and assignment check both addresses, the one read and the one written:
// every load or store of a whole vector, whatever road made the pointer (a cast of `x + 1`, a byte
// offset, the binding's own cast, __ldg), is a copy of the type. The type stays an aggregate
// (`float4{a, b, c, d}`, `= {0}`), which a constructor of its own would not allow. Reading one member
// through a misaligned pointer (`p[i].x`, a scalar load on a GPU too) is not checked.
inline void misaligned_vector(const void* address, std::size_t alignment, const char* type);  // cuda_cpu.h
template <class V> inline constexpr const char* vector_name = "a vector type";
template <class V> struct VectorAccess {
  VectorAccess() = default;
  VectorAccess(const VectorAccess& from) { check(&from); check(this); }
  VectorAccess& operator=(const VectorAccess& from) { check(&from); check(this); return *this; }
  // `this` is the vector's own address: an empty member with [[no_unique_address]] sits at offset 0
  // (the static_asserts below hold the size). The empty asm keeps g++ from assuming the address
  // aligned because of the type.
  static void check(const void* at) {
    auto address = reinterpret_cast<unsigned long>(at);
    asm("" : "+r"(address));
    if (address & (alignof(V) - 1)) misaligned_vector(at, alignof(V), vector_name<V>);
  }
};
}  // namespace cuset
// Ends the struct of the vector type V of n elements of T (named in the rest): the checking member,
// and the tuple protocol, through which structured bindings (`auto [x, y] = v;`) bind the elements
// (else the member would be a name too).
#define CUSET_VEC_END(V, T, n, ...) \
  template <std::size_t I> constexpr T& get() & { return std::get<I>(std::tie(__VA_ARGS__)); } \
  template <std::size_t I> constexpr const T& get() const& { return std::get<I>(std::tie(__VA_ARGS__)); } \
  template <std::size_t I> constexpr T&& get() && { return std::move(std::get<I>(std::tie(__VA_ARGS__))); } \
  [[no_unique_address]] cuset::VectorAccess<V> cuset_access; \
  }; \
  static_assert(sizeof(V) == n * sizeof(T)); \
  template <> struct std::tuple_size<V> : std::integral_constant<std::size_t, n> {}; \
  template <std::size_t I> struct std::tuple_element<I, V> { using type = T; }; \
  template <> inline constexpr const char* cuset::vector_name<V> = #V;
#define CUSET_VEC2(T, N) \
  struct alignas(2 * sizeof(T)) N##2 { \
    T x, y; \
    CUSET_VEC_END(N##2, T, 2, x, y) \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CUSET_VEC3(T, N) \
  struct N##3 { T x, y, z; }; \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CUSET_VEC4(T, N) \
  struct alignas(4 * sizeof(T) > 16 ? 16 : 4 * sizeof(T)) N##4 { \
    T x, y, z, w; \
    CUSET_VEC_END(N##4, T, 4, x, y, z, w) \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define CUSET_VECS(T, N) CUSET_VEC2(T, N) CUSET_VEC3(T, N) CUSET_VEC4(T, N)
CUSET_VECS(float, float)
CUSET_VECS(double, double)
CUSET_VECS(int, int)
CUSET_VECS(unsigned, uint)
CUSET_VECS(long, long)
CUSET_VECS(unsigned long, ulong)
CUSET_VECS(long long, longlong)
CUSET_VECS(unsigned long long, ulonglong)
CUSET_VECS(short, short)
CUSET_VECS(unsigned short, ushort)
CUSET_VECS(signed char, char)
CUSET_VECS(unsigned char, uchar)
#undef CUSET_VECS
#undef CUSET_VEC2
#undef CUSET_VEC3
#undef CUSET_VEC4
#undef CUSET_VEC_END
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};


enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorNotReady = 600,
  cudaErrorMisalignedAddress = 716,
  cudaErrorNotSupported = 801,
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
struct CUstream_st { unsigned flags; };
typedef CUstream_st* cudaStream_t;
struct CUevent_st { std::chrono::steady_clock::time_point at; };
typedef CUevent_st* cudaEvent_t;
#define cudaStreamDefault 0
#define cudaStreamNonBlocking 1
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaEventDefault 0
#define cudaEventDisableTiming 2
// Enumerators, not macros, as in CUDA: a candidate's `#ifdef` on them sees what nvcc sees.
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2, cudaFuncCachePreferEqual = 3 };
enum cudaSharedMemConfig { cudaSharedMemBankSizeDefault = 0, cudaSharedMemBankSizeFourByte = 1, cudaSharedMemBankSizeEightByte = 2 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9 };

struct cudaDeviceProp {
  char name[256] = "CuSeT CPU runtime";
  size_t totalGlobalMem = size_t(80) << 30;
  size_t sharedMemPerBlock = 48 * 1024;
  size_t sharedMemPerBlockOptin = 227 * 1024;
  size_t sharedMemPerMultiprocessor = 228 * 1024;
  int regsPerBlock = 65536;
  int warpSize = 32;
  int maxThreadsPerBlock = 1024;
  int maxThreadsDim[3] = {1024, 1024, 64};
  int maxGridSize[3] = {2147483647, 65535, 65535};
  int multiProcessorCount = 132;
  int maxThreadsPerMultiProcessor = 2048;
  int major = 9;
  int minor = 0;
  int clockRate = 1980000;
  int l2CacheSize = 50 * 1024 * 1024;
  size_t totalConstMem = 65536;
};

// Tier 2's device boundary (runtime/device_port.cpp): once the harness opened the port in the
// candidate's host process, device memory and launches live in the device process, and the
// runtime API goes through the port. Weak: without the runtime library everything is local.
extern "C" __attribute__((weak)) int cuset_port_is_open();
extern "C" __attribute__((weak)) int cuset_arena_owns(const void* p);
extern "C" __attribute__((weak)) int cuset_port_malloc(void** p, size_t bytes);
extern "C" __attribute__((weak)) int cuset_port_free(void* p);
extern "C" __attribute__((weak)) int cuset_port_memcpy(void* dst, const void* src, size_t n,
                                                       unsigned long long stream, int nonblocking);
extern "C" __attribute__((weak)) int cuset_port_memset(void* dst, int value, size_t n, unsigned long long stream,
                                                       int nonblocking);
extern "C" __attribute__((weak)) int cuset_port_stream(const char* action, unsigned long long stream,
                                                       unsigned long long event);
extern "C" __attribute__((weak)) int cuset_port_symbol(const void* symbol, void* host, size_t n, int to_device);
extern "C" __attribute__((weak)) int cuset_port_last_error(int take);
extern "C" __attribute__((weak)) int cuset_port_attribute(const void* function, const char* name, long value);
inline bool cuset_remote() { return cuset_port_is_open && cuset_port_is_open(); }
inline bool cuset_remote_address(const void* p) { return cuset_remote() && cuset_arena_owns(p); }

// A stream as the device process knows it: 0 for the legacy default stream (and the per-thread
// one, which a default build maps to it), else the handle, which is never freed, so never reused.
inline unsigned long long cuset_stream_id(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread ? 0 : reinterpret_cast<unsigned long long>(s);
}
inline int cuset_stream_nonblocking(cudaStream_t s) { return cuset_stream_id(s) && (s->flags & cudaStreamNonBlocking); }
// A synchronisation or stream query for the device process (streams.py names the actions).
inline cudaError_t cuset_stream_call(const char* action, cudaStream_t s, cudaEvent_t e = nullptr) {
  if (!cuset_remote()) return cudaSuccess;
  return static_cast<cudaError_t>(cuset_port_stream(action, cuset_stream_id(s), reinterpret_cast<unsigned long long>(e)));
}

inline cudaError_t& cuset_last_error() {
  static cudaError_t error = cudaSuccess;
  return error;
}

// Why the last failed kernel launch failed, until cudaGetLastError() consumes it: a failed launch
// nobody checked is reported by the harness (on a GPU the kernel would not run and its outputs
// would hold garbage).
inline std::string& cuset_launch_failure() {
  static std::string reason;
  return reason;
}

inline cudaError_t cudaGetLastError() {
  if (cuset_remote()) return static_cast<cudaError_t>(cuset_port_last_error(1));
  cudaError_t e = cuset_last_error();
  cuset_last_error() = cudaSuccess;
  cuset_launch_failure().clear();
  return e;
}
inline cudaError_t cudaPeekAtLastError() {
  return cuset_remote() ? static_cast<cudaError_t>(cuset_port_last_error(0)) : cuset_last_error();
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}
inline cudaError_t cudaDeviceSynchronize() { return cuset_stream_call("synchronize_device", nullptr); }
inline cudaError_t cudaThreadSynchronize() { return cudaDeviceSynchronize(); }
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { *p = cudaDeviceProp(); return cudaSuccess; }
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMultiProcessorCount ? 132 : a == cudaDevAttrMaxThreadsPerBlock ? 1024 : 227 * 1024;
  return cudaSuccess;
}

// Fresh device memory holds garbage on a GPU; here it holds 0xFF bytes (NaN for floats, -1 for
// ints), so a kernel that reads memory nobody wrote gives wrong values.
template <class T> inline cudaError_t cudaMalloc(T** p, size_t bytes) {
  if (cuset_remote()) return static_cast<cudaError_t>(cuset_port_malloc(reinterpret_cast<void**>(p), bytes));
  size_t padded = (bytes + 255) / 256 * 256 + 256;
  *p = static_cast<T*>(std::aligned_alloc(256, padded));
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(static_cast<void*>(*p), 0xFF, padded);
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMallocManaged(T** p, size_t bytes, unsigned = 1) { return cudaMalloc(p, bytes); }
template <class T> inline cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMalloc(p, bytes); }
template <class T> inline cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
// cudaFree waits for the device, as on a GPU (the device process does it).
inline cudaError_t cudaFree(void* p) {
  if (cuset_remote_address(p)) return static_cast<cudaError_t>(cuset_port_free(p));
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
// The synchronous copy and memset are the legacy default stream's work.
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind = cudaMemcpyDefault, cudaStream_t stream = nullptr) {
  if (cuset_remote())
    return static_cast<cudaError_t>(cuset_port_memcpy(d, s, n, cuset_stream_id(stream), cuset_stream_nonblocking(stream)));
  std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k = cudaMemcpyDefault) {
  return cudaMemcpyAsync(d, s, n, k, nullptr);
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t stream = nullptr) {
  if (cuset_remote_address(d))
    return static_cast<cudaError_t>(cuset_port_memset(d, v, n, cuset_stream_id(stream), cuset_stream_nonblocking(stream)));
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) { return cudaMemsetAsync(d, v, n, nullptr); }
inline cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h, cudaMemcpyKind = cudaMemcpyDefault) {
  for (size_t r = 0; r < h; ++r) {
    cudaError_t e = cudaMemcpy(static_cast<char*>(d) + r * dp, static_cast<const char*>(s) + r * sp, w);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* s, size_t n, size_t offset = 0, cudaMemcpyKind = cudaMemcpyHostToDevice) {
  char* at = reinterpret_cast<char*>(&symbol) + offset;
  if (cuset_remote()) return static_cast<cudaError_t>(cuset_port_symbol(at, const_cast<void*>(s), n, 1));
  std::memcpy(at, s, n);
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* s, size_t n, size_t offset = 0, cudaMemcpyKind = cudaMemcpyHostToDevice, cudaStream_t = nullptr) {
  return cudaMemcpyToSymbol(symbol, s, n, offset);
}
template <class T> inline cudaError_t cudaMemcpyFromSymbol(void* d, const T& symbol, size_t n, size_t offset = 0, cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  const char* at = reinterpret_cast<const char*>(&symbol) + offset;
  if (cuset_remote()) return static_cast<cudaError_t>(cuset_port_symbol(at, d, n, 0));
  std::memcpy(d, at, n);
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaGetSymbolAddress(void** p, T& symbol) { *p = &symbol; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) { *s = new CUstream_st{flags}; return cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int) { return cudaStreamCreateWithFlags(s, flags); }
// Its pending work still runs, as on a GPU; the handle stays allocated so no later stream reuses it.
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cuset_stream_call("synchronize", s); }
inline cudaError_t cudaStreamQuery(cudaStream_t s) { return cuset_stream_call("query", s); }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) { return cuset_stream_call("wait", s, e); }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st(); return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  e->at = std::chrono::steady_clock::now();
  return cuset_stream_call("record", s, e);
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cuset_stream_call("wait", nullptr, e); }
inline cudaError_t cudaEventQuery(cudaEvent_t e) { return cuset_stream_call("query_event", nullptr, e); }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <class F> inline cudaError_t cudaFuncSetCacheConfig(F, int) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetCacheConfig(int) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetSharedMemConfig(int) { return cudaSuccess; }
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) { *n = 2; return cudaSuccess; }
template <class F> inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* grid, int* block, F, size_t = 0, int = 0) {
  *grid = 264;
  *block = 256;
  return cudaSuccess;
}

#endif  // CUSET_CUSET_CUDA_TYPES_H
