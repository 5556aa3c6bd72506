// CPU stand-ins for the CUDA parts of PyTorch's C++ API and for cuda_fp16/cuda_bf16: half
// types are c10::Half/c10::BFloat16 (so `data_ptr<at::Half>()` casts work), streams and
// guards are tokens, and the launch check macros read the runtime's last error.
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
struct CUDAStream {
  cudaStream_t stream() const { return nullptr; }
  operator cudaStream_t() const { return nullptr; }
  c10::DeviceIndex device_index() const { return 0; }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getDefaultCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getStreamFromPool(bool = false, c10::DeviceIndex = -1) { return CUDAStream(); }
struct CUDAGuard {
  template <class... A> explicit CUDAGuard(A&&...) {}
  template <class D> void set_device(D&&) {}
};
struct OptionalCUDAGuard {
  template <class... A> explicit OptionalCUDAGuard(A&&...) {}
  template <class D> void set_device(D&&) {}
};
struct CUDAStreamGuard {
  template <class... A> explicit CUDAStreamGuard(A&&...) {}
};
inline c10::DeviceIndex current_device() { return 0; }
inline c10::DeviceIndex device_count() { return 1; }
}  // namespace cuda
}  // namespace c10

namespace at {
namespace cuda {
using c10::cuda::CUDAGuard;
using c10::cuda::CUDAStream;
using c10::cuda::CUDAStreamGuard;
using c10::cuda::OptionalCUDAGuard;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
using c10::cuda::getStreamFromPool;
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
