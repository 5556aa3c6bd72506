// Light stand-in for the CUDA side of the PyTorch C++ API (streams, guards, CUDA error
// checks). As in PyTorch, it comes only with the ATen/cuda and c10/cuda headers, not with
// torch/extension.h.
#pragma once
#include <cuset_torch_light.h>
#include <cuda_runtime_api.h>

namespace at {
namespace cuda {
struct CUDAStream {
  explicit CUDAStream(int unused = 0);
  cudaStream_t stream() const;
  operator cudaStream_t() const;
  Device device() const;
  DeviceIndex device_index() const;
  int64_t id() const;
  void synchronize() const;
  bool query() const;
  bool operator==(const CUDAStream& other) const;
};
CUDAStream getCurrentCUDAStream(DeviceIndex device = -1);
CUDAStream getDefaultCUDAStream(DeviceIndex device = -1);
CUDAStream getStreamFromPool(bool high_priority = false, DeviceIndex device = -1);
CUDAStream getStreamFromPool(int priority, DeviceIndex device = -1);
void setCurrentCUDAStream(CUDAStream stream);
cudaDeviceProp* getCurrentDeviceProperties();
cudaDeviceProp* getDeviceProperties(DeviceIndex device);
DeviceIndex current_device();
DeviceIndex device_count();
void set_device(DeviceIndex device);
void device_synchronize();
bool is_available();
struct CUDAGuard {
  explicit CUDAGuard(Device device);
  explicit CUDAGuard(DeviceIndex device);
  explicit CUDAGuard(int device);
  void set_device(Device device);
  void set_index(DeviceIndex device);
};
struct OptionalCUDAGuard {
  OptionalCUDAGuard();
  explicit OptionalCUDAGuard(std::optional<Device> device);
  explicit OptionalCUDAGuard(Device device);
  explicit OptionalCUDAGuard(DeviceIndex device);
  explicit OptionalCUDAGuard(int device);
  void set_device(Device device);
  void set_index(DeviceIndex device);
  void reset();
};
struct CUDAEvent {
  CUDAEvent();
  explicit CUDAEvent(unsigned int flags);
  void record(const CUDAStream& stream);
  void record();
  void block(const CUDAStream& stream);
  void synchronize() const;
  bool query() const;
  float elapsed_time(const CUDAEvent& other) const;
  operator cudaEvent_t() const;
  cudaEvent_t event() const;
};
void* getCUDABlasHandle();
void* getCurrentCUDABlasHandle();
void* getCurrentCUDABlasLtHandle();
}  // namespace cuda

}  // namespace at

namespace c10 {
inline namespace cuset_stand_in {  // the stand-in's own (cuset_torch_light.h says why)
namespace cuda {
using at::cuda::CUDAEvent;
using at::cuda::CUDAGuard;
using at::cuda::CUDAStream;
// Only c10::cuda has it (GPU builds reject at::cuda::CUDAStreamGuard).
struct CUDAStreamGuard {
  explicit CUDAStreamGuard(CUDAStream stream);
  void reset_stream(CUDAStream stream);
};
using at::cuda::current_device;
using at::cuda::device_count;
using at::cuda::device_synchronize;
using at::cuda::getCurrentCUDAStream;
using at::cuda::getDefaultCUDAStream;
using at::cuda::getStreamFromPool;
using at::cuda::OptionalCUDAGuard;
using at::cuda::set_device;
using at::cuda::setCurrentCUDAStream;
void c10_cuda_check_implementation(int err, const char* file, const char* function, int line, bool include_device_assertions);
}  // namespace cuda
using cuda::OptionalCUDAGuard;
struct OptionalDeviceGuard {
  OptionalDeviceGuard();
  explicit OptionalDeviceGuard(std::optional<Device> device);
};
struct DeviceGuard {
  explicit DeviceGuard(Device device);
};
}  // namespace cuset_stand_in
}  // namespace c10

#define C10_CUDA_CHECK(expr)                                                           \
  do {                                                                                 \
    const cudaError_t cuset_err = (expr);                                              \
    ::c10::cuda::c10_cuda_check_implementation(static_cast<int>(cuset_err), __FILE__, __func__, __LINE__, true); \
  } while (0)
#define C10_CUDA_CHECK_WARN(expr) C10_CUDA_CHECK(expr)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#define AT_CUDA_CHECK(expr) C10_CUDA_CHECK(expr)
#define C10_CUDA_IGNORE_ERROR(expr) ((void)(expr))

