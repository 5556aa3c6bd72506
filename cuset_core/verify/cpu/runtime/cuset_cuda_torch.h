// CPU stand-ins for the CUDA parts of PyTorch's C++ API and for cuda_fp16/cuda_bf16: half
// types are c10::Half/c10::BFloat16 (so `data_ptr<at::Half>()` casts work), streams are the
// runtime's, device guards are tokens, and the launch check macros read the runtime's last error.
#ifndef CUSET_CUSET_CUDA_TORCH_H
#define CUSET_CUSET_CUDA_TORCH_H

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/Exception.h>

typedef c10::Half __half;
typedef c10::Half half;
typedef c10::BFloat16 __nv_bfloat16;
typedef c10::BFloat16 nv_bfloat16;
struct __half2 { __half x, y; };
typedef __half2 half2;
struct __nv_bfloat162 { __nv_bfloat16 x, y; };

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half __int2half_rn(int i) { return __half(static_cast<float>(i)); }
inline __half __hadd(__half a, __half b) { return __half(float(a) + float(b)); }
inline __half __hsub(__half a, __half b) { return __half(float(a) - float(b)); }
inline __half __hmul(__half a, __half b) { return __half(float(a) * float(b)); }
inline __half __hdiv(__half a, __half b) { return __half(float(a) / float(b)); }
inline __half __hneg(__half a) { return __half(-float(a)); }
inline __half __hfma(__half a, __half b, __half c) { return __half(float(a) * float(b) + float(c)); }
inline __half __hmax(__half a, __half b) { return float(a) < float(b) ? b : a; }
inline __half __hmin(__half a, __half b) { return float(b) < float(a) ? b : a; }
inline bool __hgt(__half a, __half b) { return float(a) > float(b); }
inline bool __hlt(__half a, __half b) { return float(a) < float(b); }
inline bool __hge(__half a, __half b) { return float(a) >= float(b); }
inline bool __hle(__half a, __half b) { return float(a) <= float(b); }
inline bool __heq(__half a, __half b) { return float(a) == float(b); }
inline __half hexp(__half a) { return __half(expf(float(a))); }
inline __half hlog(__half a) { return __half(logf(float(a))); }
inline __half hsqrt(__half a) { return __half(sqrtf(float(a))); }
inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf(float(a))); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline float2 __half22float2(__half2 h) { return float2{float(h.x), float(h.y)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline __half2 __hadd2(__half2 a, __half2 b) { return __half2{__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return __half2{__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(h); }

namespace c10 {
namespace cuda {
// Torch's streams: the current stream of this thread (the legacy default one unless a guard set
// another), and pool streams, which torch creates cudaStreamNonBlocking. The device process runs the
// binding's torch operations on the current stream's order.
struct CUDAStream {
  cudaStream_t handle = nullptr;
  CUDAStream() = default;
  explicit CUDAStream(cudaStream_t s) : handle(s) {}
  cudaStream_t stream() const { return handle; }
  operator cudaStream_t() const { return handle; }
  c10::DeviceIndex device_index() const { return 0; }
  void synchronize() const { cudaStreamSynchronize(handle); }
  bool query() const { return cudaStreamQuery(handle) == cudaSuccess; }
  bool operator==(const CUDAStream& other) const { return handle == other.handle; }
  bool operator!=(const CUDAStream& other) const { return handle != other.handle; }
};
inline cudaStream_t& current_stream_handle() {
  thread_local cudaStream_t current = nullptr;
  return current;
}
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(current_stream_handle()); }
inline CUDAStream getDefaultCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getStreamFromPool(bool = false, c10::DeviceIndex = -1) {
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  return CUDAStream(stream);
}
inline void setCurrentCUDAStream(CUDAStream stream) {
  current_stream_handle() = stream.stream();
  cuset_stream_call("current", stream.stream());
}
struct CUDAGuard {
  template <class... A> explicit CUDAGuard(A&&...) {}
  template <class D> void set_device(D&&) {}
};
struct OptionalCUDAGuard {
  template <class... A> explicit OptionalCUDAGuard(A&&...) {}
  template <class D> void set_device(D&&) {}
};
struct CUDAStreamGuard {
  CUDAStream original;
  explicit CUDAStreamGuard(CUDAStream stream) : original(getCurrentCUDAStream()) { setCurrentCUDAStream(stream); }
  CUDAStreamGuard(const CUDAStreamGuard&) = delete;
  ~CUDAStreamGuard() { setCurrentCUDAStream(original); }
  CUDAStream original_stream() const { return original; }
  CUDAStream current_stream() const { return getCurrentCUDAStream(); }
};
inline c10::DeviceIndex current_device() { return 0; }
inline c10::DeviceIndex device_count() { return 1; }
}  // namespace cuda
}  // namespace c10

namespace at {
namespace cuda {
// torch's event over the runtime's: record on a stream, make another stream wait (block), wait.
struct CUDAEvent {
  cudaEvent_t event = nullptr;
  explicit CUDAEvent(unsigned = cudaEventDisableTiming) { cudaEventCreate(&event); }
  CUDAEvent(const CUDAEvent&) = delete;
  ~CUDAEvent() { cudaEventDestroy(event); }
  void record() { record(c10::cuda::getCurrentCUDAStream()); }
  void record(const c10::cuda::CUDAStream& stream) { cudaEventRecord(event, stream.stream()); }
  void block(const c10::cuda::CUDAStream& stream) { cudaStreamWaitEvent(stream.stream(), event, 0); }
  void synchronize() const { cudaEventSynchronize(event); }
  bool query() const { return cudaEventQuery(event) == cudaSuccess; }
  float elapsed_time(const CUDAEvent& other) const {
    float ms = 0;
    cudaEventElapsedTime(&ms, event, other.event);
    return ms;
  }
};
using c10::cuda::CUDAGuard;
using c10::cuda::CUDAStream;
using c10::cuda::CUDAStreamGuard;
using c10::cuda::OptionalCUDAGuard;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
using c10::cuda::getStreamFromPool;
using c10::cuda::setCurrentCUDAStream;
using c10::cuda::current_device;
using c10::cuda::device_count;
inline cudaDeviceProp* getCurrentDeviceProperties() {
  static cudaDeviceProp properties;
  return &properties;
}
inline cudaDeviceProp* getDeviceProperties(c10::DeviceIndex) { return getCurrentDeviceProperties(); }
}  // namespace cuda
}  // namespace at

#define C10_CUDA_CHECK(expr)                                                     \
  do {                                                                           \
    cudaError_t cuset_err = (expr);                                              \
    TORCH_CHECK(cuset_err == cudaSuccess, "CUDA error: ", cudaGetErrorString(cuset_err)); \
  } while (0)
#define AT_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#define CUDART_INF_F INFINITY
#define CUDART_NAN_F NAN
#define CUDART_INF INFINITY
#define CUDART_NAN NAN
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931
#define CUDART_SQRT_2PI_F 2.506628275f
#define CUDART_MAX_NORMAL_F 3.40282347e+38f
#define CUDART_MIN_DENORM_F 1.40129846e-45f

#endif  // CUSET_CUSET_CUDA_TORCH_H
