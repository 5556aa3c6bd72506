// A minimal stand-in for <torch/extension.h>: declarations only, enough for the demo solutions
// to compile with nvcc in about a second instead of parsing the real torch headers.
// Nothing here is defined, so code compiled against it cannot be linked or run.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <cuda_runtime.h>

namespace c10 {
enum class ScalarType { Float, Int, Long, Bool };
}

namespace at {
using c10::ScalarType;

class IntArrayRef {
 public:
  IntArrayRef(std::initializer_list<int64_t> values);
  IntArrayRef(const std::vector<int64_t>& values);
  size_t size() const;
  int64_t operator[](size_t index) const;
  std::vector<int64_t> vec() const;
};

class TensorOptions {
 public:
  TensorOptions dtype(ScalarType type) const;
};

class Tensor {
 public:
  template <typename T>
  T* data_ptr() const;
  int64_t numel() const;
  int64_t dim() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  IntArrayRef sizes() const;
  ScalarType scalar_type() const;
  TensorOptions options() const;
  bool is_cuda() const;
  bool is_contiguous() const;
};

Tensor empty(IntArrayRef size, TensorOptions options);
Tensor zeros(IntArrayRef size, TensorOptions options);
Tensor empty_like(const Tensor& other);
Tensor zeros_like(const Tensor& other);
}  // namespace at

namespace torch {
using at::empty;
using at::empty_like;
using at::IntArrayRef;
using at::ScalarType;
using at::Tensor;
using at::TensorOptions;
using at::zeros;
using at::zeros_like;
constexpr ScalarType kFloat32 = ScalarType::Float;
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kInt32 = ScalarType::Int;
constexpr ScalarType kInt = ScalarType::Int;
constexpr ScalarType kInt64 = ScalarType::Long;
constexpr ScalarType kLong = ScalarType::Long;
constexpr ScalarType kBool = ScalarType::Bool;
}  // namespace torch

void torch_check_failed(const char* condition, ...);

#define TORCH_CHECK(cond, ...) \
  ((cond) ? (void)0 : torch_check_failed(#cond, ##__VA_ARGS__))
