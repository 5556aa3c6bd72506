// A light stand-in for the PyTorch C++ API, for tier 1 only: it lets nvcc type-check and
// compile torch extensions in about a second. Host functions are declared, never defined
// (nothing is linked); device-visible helpers (Half, BFloat16) are defined. Generic
// operations take any arguments (variadic templates) so that valid code is never rejected
// for lack of an exact overload; the real headers are the `--strict` mode.
#pragma once

// What the stand-in's own declarations use (and <string>, <stdexcept> below unless on demand).
#include <array>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iosfwd>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
// The rest of what real torch/extension.h includes, which candidates rely on without including it.
// Parsing these is most of a tier-1 compile (nvcc's front end: about 1.1 s of 1.4 s), so tier 1
// first compiles with CUSET_STD_ON_DEMAND and only the ones the candidate's code names
// (CUSET_STD_<HEADER>, verify/compile/__init__.py's std_headers_named), then, if that fails, without it.
// Without <string>, <iosfwd> declares std::string: enough for the declarations below.
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_STRING)
#include <stdexcept>
#include <string>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_ALGORITHM)
#include <algorithm>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_FUNCTIONAL)
#include <functional>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_IOSTREAM)
#include <iostream>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_MAP)
#include <map>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_MEMORY)
#include <memory>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_NUMERIC)
#include <numeric>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_SSTREAM)
#include <sstream>
#endif
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_UNORDERED_MAP)
#include <unordered_map>
#endif

// CUDA's half-precision headers too are on demand (CUSET_STD_HALF: the code names a half type).
#if defined(__CUDACC__) && (!defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_HALF))
#define CUSET_CUDA_HALF 1
#endif
#ifdef __CUDACC__
#include <cuda_runtime.h>
#ifdef CUSET_CUDA_HALF
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
#define C10_HOST_DEVICE __host__ __device__
#define C10_DEVICE __device__
#define C10_HOST __host__
#else
#define C10_HOST_DEVICE
#define C10_DEVICE
#define C10_HOST
#endif

#define C10_API
#define TORCH_API
#define C10_EXPORT
#define C10_LIKELY(x) (x)
#define C10_UNLIKELY(x) (x)
#define C10_UNUSED
#define C10_RESTRICT __restrict__
#define C10_WARP_SIZE 32
#define C10_LAUNCH_BOUNDS_0 __launch_bounds__(256, 4)
#define C10_LAUNCH_BOUNDS_1(max_threads_per_block) __launch_bounds__((max_threads_per_block))
#define C10_LAUNCH_BOUNDS_2(max_threads_per_block, min_blocks_per_sm) \
  __launch_bounds__((max_threads_per_block), (min_blocks_per_sm))

// The stand-in's c10 lives in an inline namespace (its names are still spelled c10::...): the
// candidate's library links libc10, which exports functions, vtables and typeinfo under the plain
// names (c10::Error::what(), c10::Device::Device(std::string const&), ...), and the dynamic linker
// bound the stand-in's calls to those, which read the real classes' layout from these (an error's
// message came back as freed heap bytes, one run in five).
namespace c10 {
inline namespace cuset_stand_in {

enum class ScalarType : int8_t {
  Byte, Char, Short, Int, Long, Half, Float, Double, ComplexHalf, ComplexFloat, ComplexDouble,
  Bool, QInt8, QUInt8, QInt32, BFloat16, Float8_e5m2, Float8_e4m3fn, UInt16, UInt32, UInt64,
  Undefined, NumOptions
};
constexpr ScalarType kByte = ScalarType::Byte, kChar = ScalarType::Char, kShort = ScalarType::Short,
    kInt = ScalarType::Int, kLong = ScalarType::Long, kHalf = ScalarType::Half,
    kFloat = ScalarType::Float, kDouble = ScalarType::Double, kBool = ScalarType::Bool,
    kBFloat16 = ScalarType::BFloat16, kComplexFloat = ScalarType::ComplexFloat,
    kComplexDouble = ScalarType::ComplexDouble, kUInt8 = ScalarType::Byte, kInt8 = ScalarType::Char,
    kInt16 = ScalarType::Short, kInt32 = ScalarType::Int, kInt64 = ScalarType::Long,
    kFloat16 = ScalarType::Half, kFloat32 = ScalarType::Float, kFloat64 = ScalarType::Double,
    kFloat8_e4m3fn = ScalarType::Float8_e4m3fn, kFloat8_e5m2 = ScalarType::Float8_e5m2,
    kUInt16 = ScalarType::UInt16, kUInt32 = ScalarType::UInt32, kUInt64 = ScalarType::UInt64;
const char* toString(ScalarType t);
size_t elementSize(ScalarType t);
bool isFloatingType(ScalarType t);
bool isIntegralType(ScalarType t, bool include_bool = false);
bool isComplexType(ScalarType t);
#ifdef CUSET_STD_ON_DEMAND  // declared only: a body needs <ostream>
std::ostream& operator<<(std::ostream& stream, ScalarType t);
#else
inline std::ostream& operator<<(std::ostream& stream, ScalarType t) { return stream << toString(t); }
#endif

enum class DeviceType : int8_t { CPU = 0, CUDA = 1, Meta = 9 };
constexpr DeviceType kCPU = DeviceType::CPU, kCUDA = DeviceType::CUDA, kMeta = DeviceType::Meta;
using DeviceIndex = int8_t;

struct Device {
  Device(DeviceType type, DeviceIndex index = -1);
  Device(const std::string& spec);
  Device(const char* spec);
  DeviceType type() const noexcept;
  DeviceIndex index() const noexcept;
  bool has_index() const noexcept;
  bool is_cuda() const noexcept;
  bool is_cpu() const noexcept;
  std::string str() const;
  bool operator==(const Device& other) const noexcept;
  bool operator!=(const Device& other) const noexcept;
  // State for tier 2's bridge, which defines these members; unused by tier 1.
  DeviceType cuset_type = DeviceType::CPU;
  DeviceIndex cuset_index = -1;
};
std::ostream& operator<<(std::ostream& stream, const Device& device);

enum class Layout : int8_t { Strided, Sparse };
constexpr Layout kStrided = Layout::Strided, kSparse = Layout::Sparse;
enum class MemoryFormat : int8_t { Contiguous, Preserve, ChannelsLast, ChannelsLast3d };

template <class T>
using optional = std::optional<T>;
using std::nullopt;
using std::nullopt_t;
template <class T>
using OptionalArrayRef = std::optional<std::vector<T>>;

template <class T>
class ArrayRef {
 public:
  using value_type = T;
  using iterator = const T*;
  using const_iterator = const T*;
  using size_type = size_t;
  constexpr ArrayRef() : data_(nullptr), size_(0) {}
  ArrayRef(const T& one) : data_(&one), size_(1) {}
  constexpr ArrayRef(const T* data, size_t size) : data_(data), size_(size) {}
  ArrayRef(const T* begin, const T* end) : data_(begin), size_(end - begin) {}
  template <class A>
  ArrayRef(const std::vector<T, A>& v) : data_(v.data()), size_(v.size()) {}
  template <size_t N>
  constexpr ArrayRef(const std::array<T, N>& a) : data_(a.data()), size_(N) {}
  template <size_t N>
  constexpr ArrayRef(const T (&a)[N]) : data_(a), size_(N) {}
  constexpr ArrayRef(const std::initializer_list<T>& list)
      : data_(list.begin() == list.end() ? nullptr : list.begin()), size_(list.size()) {}
  constexpr const T* begin() const { return data_; }
  constexpr const T* end() const { return data_ + size_; }
  constexpr const T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr const T& operator[](size_t i) const { return data_[i]; }
  const T& at(size_t i) const { return data_[i]; }
  const T& front() const { return data_[0]; }
  const T& back() const { return data_[size_ - 1]; }
  ArrayRef slice(size_t start, size_t n) const { return ArrayRef(data_ + start, n); }
  ArrayRef slice(size_t start) const { return ArrayRef(data_ + start, size_ - start); }
  bool equals(ArrayRef other) const;
  std::vector<T> vec() const { return std::vector<T>(data_, data_ + size_); }
  operator std::vector<T>() const { return vec(); }
  bool operator==(ArrayRef other) const;
  bool operator!=(ArrayRef other) const;

 private:
  const T* data_;
  size_t size_;
};
using IntArrayRef = ArrayRef<int64_t>;
template <class T>
std::ostream& operator<<(std::ostream& stream, ArrayRef<T> values);
using SymInt = int64_t;
using SymIntArrayRef = ArrayRef<int64_t>;

// Half and BFloat16 are usable in kernels, so unlike the rest they are defined.
struct alignas(2) Half {
  unsigned short x;
  Half() = default;
#ifdef CUSET_CUDA_HALF
  C10_HOST_DEVICE Half(float value) : x(__half_as_ushort(__float2half(value))) {}
  C10_HOST_DEVICE operator float() const { return __half2float(__ushort_as_half(x)); }
  C10_HOST_DEVICE Half(const __half& value) : x(__half_as_ushort(value)) {}
  C10_HOST_DEVICE operator __half() const { return __ushort_as_half(x); }
#else
  C10_HOST_DEVICE Half(float value);
  C10_HOST_DEVICE operator float() const;
#endif
};
struct alignas(2) BFloat16 {
  unsigned short x;
  BFloat16() = default;
#ifdef CUSET_CUDA_HALF
  C10_HOST_DEVICE BFloat16(float value) : x(__bfloat16_as_ushort(__float2bfloat16(value))) {}
  C10_HOST_DEVICE operator float() const { return __bfloat162float(__ushort_as_bfloat16(x)); }
  C10_HOST_DEVICE BFloat16(const __nv_bfloat16& value) : x(__bfloat16_as_ushort(value)) {}
  C10_HOST_DEVICE operator __nv_bfloat16() const { return __ushort_as_bfloat16(x); }
#else
  C10_HOST_DEVICE BFloat16(float value);
  C10_HOST_DEVICE operator float() const;
#endif
};

// Arithmetic as c10 defines it: in float, back to T with T or an integer, float or double
// with a float or double. One operator per line keeps compiler messages short.
#define CUSET_REDUCED_OP(T, op)                                                                        \
  inline C10_HOST_DEVICE T operator op(const T& a, const T& b) { return float(a) op float(b); }      \
  inline C10_HOST_DEVICE float operator op(T a, float b) { return float(a) op b; }                    \
  inline C10_HOST_DEVICE float operator op(float a, T b) { return a op float(b); }                    \
  inline C10_HOST_DEVICE double operator op(T a, double b) { return float(a) op b; }                  \
  inline C10_HOST_DEVICE double operator op(double a, T b) { return a op float(b); }                  \
  inline C10_HOST_DEVICE T operator op(T a, int b) { return float(a) op b; }                          \
  inline C10_HOST_DEVICE T operator op(int a, T b) { return a op float(b); }                          \
  inline C10_HOST_DEVICE T operator op(T a, int64_t b) { return float(a) op b; }                      \
  inline C10_HOST_DEVICE T operator op(int64_t a, T b) { return a op float(b); }                      \
  inline C10_HOST_DEVICE T& operator op##=(T& a, const T& b) { return a = a op b; }                   \
  inline C10_HOST_DEVICE float& operator op##=(float& a, const T& b) { return a op##= float(b); }
CUSET_REDUCED_OP(Half, +)
CUSET_REDUCED_OP(Half, -)
CUSET_REDUCED_OP(Half, *)
CUSET_REDUCED_OP(Half, /)
CUSET_REDUCED_OP(BFloat16, +)
CUSET_REDUCED_OP(BFloat16, -)
CUSET_REDUCED_OP(BFloat16, *)
CUSET_REDUCED_OP(BFloat16, /)
#undef CUSET_REDUCED_OP
inline C10_HOST_DEVICE Half operator-(const Half& a) { return -float(a); }
inline C10_HOST_DEVICE BFloat16 operator-(const BFloat16& a) { return -float(a); }

template <class T>
struct complex {
  T real_, imag_;
  C10_HOST_DEVICE complex(T re = T(), T im = T()) : real_(re), imag_(im) {}
  C10_HOST_DEVICE T real() const { return real_; }
  C10_HOST_DEVICE T imag() const { return imag_; }
};

template <ScalarType S>
struct ScalarTypeToCPPType;
#define CUSET_SCALAR_CPP(cpp, name)              \
  template <>                                    \
  struct ScalarTypeToCPPType<ScalarType::name> { \
    using type = cpp;                            \
  };
CUSET_SCALAR_CPP(uint8_t, Byte)
CUSET_SCALAR_CPP(int8_t, Char)
CUSET_SCALAR_CPP(int16_t, Short)
CUSET_SCALAR_CPP(int, Int)
CUSET_SCALAR_CPP(int64_t, Long)
CUSET_SCALAR_CPP(Half, Half)
CUSET_SCALAR_CPP(float, Float)
CUSET_SCALAR_CPP(double, Double)
CUSET_SCALAR_CPP(bool, Bool)
CUSET_SCALAR_CPP(BFloat16, BFloat16)
CUSET_SCALAR_CPP(complex<float>, ComplexFloat)
CUSET_SCALAR_CPP(complex<double>, ComplexDouble)
#undef CUSET_SCALAR_CPP
template <ScalarType S>
using ScalarTypeToCPPTypeT = typename ScalarTypeToCPPType<S>::type;
namespace impl {
template <ScalarType S>
using ScalarTypeToCPPTypeT = typename ScalarTypeToCPPType<S>::type;
}

class Scalar {
 public:
  Scalar();
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  Scalar(T value);
  Scalar(Half value);
  Scalar(BFloat16 value);
  template <class T>
  T to() const;
  double toDouble() const;
  float toFloat() const;
  int64_t toLong() const;
  int toInt() const;
  bool toBool() const;
  Half toHalf() const;
  bool isFloatingPoint() const;
  bool isIntegral(bool include_bool) const;
  ScalarType type() const;
  double cuset_double = 0;
  int64_t cuset_long = 0;
  ScalarType cuset_type = ScalarType::Long;
};

struct TypeMeta {
  TypeMeta();
  TypeMeta(ScalarType type);
  operator ScalarType() const;
  ScalarType toScalarType() const;
  size_t itemsize() const;
  const char* name() const;
  template <class T>
  bool Match() const;
  template <class T>
  static TypeMeta Make();
  bool operator==(const TypeMeta& other) const;
  bool operator!=(const TypeMeta& other) const;
  bool operator==(ScalarType other) const;
  bool operator!=(ScalarType other) const;
  ScalarType cuset_type = ScalarType::Undefined;
};
std::ostream& operator<<(std::ostream& stream, const TypeMeta& meta);
ScalarType typeMetaToScalarType(TypeMeta meta);

struct TensorOptions {
  TensorOptions();
  TensorOptions(ScalarType dtype);
  TensorOptions(TypeMeta dtype);
  TensorOptions(Device device);
  TensorOptions(DeviceType device);
  TensorOptions(Layout layout);
  TensorOptions(MemoryFormat format);
  TensorOptions dtype(ScalarType dtype) const;
  TensorOptions dtype(TypeMeta dtype) const;
  TensorOptions dtype(std::optional<ScalarType> dtype) const;
  template <class T>
  TensorOptions dtype() const;
  TypeMeta dtype() const;
  TensorOptions device(Device device) const;
  TensorOptions device(DeviceType type, DeviceIndex index = -1) const;
  TensorOptions device(std::optional<Device> device) const;
  Device device() const;
  TensorOptions device_index(DeviceIndex index) const;
  DeviceIndex device_index() const;
  TensorOptions layout(Layout layout) const;
  Layout layout() const;
  TensorOptions requires_grad(bool value) const;
  bool requires_grad() const;
  TensorOptions memory_format(MemoryFormat format) const;
  TensorOptions pinned_memory(bool value) const;
  bool pinned_memory() const;
  std::optional<ScalarType> cuset_dtype;
  std::optional<Device> cuset_device;
  bool cuset_requires_grad = false;
};
TensorOptions dtype(ScalarType dtype);
TensorOptions dtype(TypeMeta dtype);
template <class T>
TensorOptions dtype();
TensorOptions device(Device device);
TensorOptions device(DeviceType type, DeviceIndex index = -1);
TensorOptions device_index(DeviceIndex index);
TensorOptions layout(Layout layout);
TensorOptions requires_grad(bool value = true);
TensorOptions memory_format(MemoryFormat format);

using Stream = void*;

namespace detail {
template <class... Args>
[[noreturn]] void torch_check_fail(const char* file, int line, Args&&... args);
template <class... Args>
void torch_warn(const char* file, int line, Args&&... args);
}  // namespace detail
template <class... Args>
std::string str(Args&&... args);

class Error : public std::exception {
 public:
  Error() = default;
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_STRING)
  explicit Error(std::string message) : cuset_message(std::move(message)) {}
  std::string cuset_message;
#else
  explicit Error(std::string message);
#endif
  const char* what() const noexcept override;
  const char* what_without_backtrace() const noexcept;
  std::string msg() const;
};
class ValueError : public Error {};
class TypeError : public Error {};
class IndexError : public Error {};
class NotImplementedError : public Error {};
class OutOfMemoryError : public Error {};

}  // namespace cuset_stand_in
}  // namespace c10

namespace caffe2 {
using c10::TypeMeta;
}

namespace at {
using namespace c10;
class Tensor;
using TensorList = ArrayRef<Tensor>;
using ITensorListRef = ArrayRef<Tensor>;
class Generator {};

namespace indexing {
struct EllipsisIndexType {};
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt);
};
constexpr std::nullopt_t None = std::nullopt;
constexpr EllipsisIndexType Ellipsis{};
struct TensorIndex {
  TensorIndex(std::nullopt_t);
  TensorIndex(EllipsisIndexType);
  TensorIndex(const char* text);
  TensorIndex(int64_t integer);
  TensorIndex(int integer);
  TensorIndex(bool boolean);
  TensorIndex(Slice slice);
  TensorIndex(const Tensor& tensor);
};
}  // namespace indexing

// Result of a generic operation: a tensor that also unpacks as a (values, indices) pair,
// so both `Tensor y = op(...)` and `auto [v, i] = op(...)` / `std::get<0>(op(...))` compile.
class Tensor;
struct OpResult;

class TensorAccessorBase {};
template <class T, size_t N>
class TensorAccessor {
 public:
  TensorAccessor<T, N - 1> operator[](int64_t i);
  const TensorAccessor<T, N - 1> operator[](int64_t i) const;
  const int64_t* sizes() const;
  const int64_t* strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  T* data();
};
template <class T>
class TensorAccessor<T, 1> {
 public:
  T& operator[](int64_t i);
  const T& operator[](int64_t i) const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  T* data();
};

// Usable on the device: packed accessors are kernel arguments, so they are defined.
template <class T, size_t N, class index_t = int64_t>
class GenericPackedTensorAccessor;
template <class T, size_t N, class index_t>
class TensorAccessorView {
 public:
  C10_HOST_DEVICE TensorAccessorView(T* data, const index_t* sizes, const index_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  C10_HOST_DEVICE TensorAccessorView<T, N - 1, index_t> operator[](index_t i) const {
    return TensorAccessorView<T, N - 1, index_t>(data_ + strides_[0] * i, sizes_ + 1, strides_ + 1);
  }
  C10_HOST_DEVICE index_t size(index_t dim) const { return sizes_[dim]; }
  C10_HOST_DEVICE index_t stride(index_t dim) const { return strides_[dim]; }
  C10_HOST_DEVICE T* data() const { return data_; }

 private:
  T* data_;
  const index_t* sizes_;
  const index_t* strides_;
};
template <class T, class index_t>
class TensorAccessorView<T, 1, index_t> {
 public:
  C10_HOST_DEVICE TensorAccessorView(T* data, const index_t* sizes, const index_t* strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  C10_HOST_DEVICE T& operator[](index_t i) const { return data_[strides_[0] * i]; }
  C10_HOST_DEVICE index_t size(index_t dim) const { return sizes_[dim]; }
  C10_HOST_DEVICE index_t stride(index_t dim) const { return strides_[dim]; }
  C10_HOST_DEVICE T* data() const { return data_; }

 private:
  T* data_;
  const index_t* sizes_;
  const index_t* strides_;
};
template <class T, size_t N, class index_t>
class GenericPackedTensorAccessor {
 public:
  GenericPackedTensorAccessor() = default;
  C10_HOST_DEVICE GenericPackedTensorAccessor(T* data, const index_t* sizes, const index_t* strides) : data_(data) {
    for (size_t d = 0; d < N; ++d) {
      sizes_[d] = sizes[d];
      strides_[d] = strides[d];
    }
  }
  C10_HOST_DEVICE auto operator[](index_t i) const {
    return TensorAccessorView<T, N, index_t>(data_, sizes_, strides_)[i];
  }
  C10_HOST_DEVICE index_t size(index_t dim) const { return sizes_[dim]; }
  C10_HOST_DEVICE index_t stride(index_t dim) const { return strides_[dim]; }
  C10_HOST_DEVICE T* data() const { return data_; }

 private:
  T* data_;
  index_t sizes_[N];
  index_t strides_[N];
};
template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t, class index_t = int64_t>
using PackedTensorAccessor = GenericPackedTensorAccessor<T, N, index_t>;
template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t>
using PackedTensorAccessor32 = GenericPackedTensorAccessor<T, N, int32_t>;
template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t>
using PackedTensorAccessor64 = GenericPackedTensorAccessor<T, N, int64_t>;
template <class T>
struct RestrictPtrTraits {
  using PtrType = T* __restrict__;
};
template <class T>
struct DefaultPtrTraits {
  using PtrType = T*;
};

struct DeprecatedTypeProperties {
  ScalarType scalarType() const;
  DeviceType device_type() const;
  bool is_cuda() const;
  std::string toString() const;
  operator ScalarType() const;
  bool operator==(const DeprecatedTypeProperties& other) const;
};

// Tensor methods that compute are declared below, one per line, taking any arguments.

class Tensor {
 public:
  Tensor();
  ~Tensor();
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other) &;
  Tensor& operator=(Tensor&& other) &;
  Tensor& operator=(const Tensor& other) &&;
  Tensor& operator=(Scalar value) &&;

  template <class T>
  T* data_ptr() const;
  void* data_ptr() const;
  template <class T>
  T* mutable_data_ptr() const;
  void* mutable_data_ptr() const;
  template <class T>
  const T* const_data_ptr() const;
  const void* const_data_ptr() const;
  template <class T>
  T* data() const;
  template <class T>
  T item() const;
  Scalar item() const;
  template <class T, size_t N>
  TensorAccessor<T, N> accessor() const&;
  template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t, class index_t = int64_t>
  GenericPackedTensorAccessor<T, N, index_t> packed_accessor() const&;
  template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t>
  GenericPackedTensorAccessor<T, N, int32_t> packed_accessor32() const&;
  template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t>
  GenericPackedTensorAccessor<T, N, int64_t> packed_accessor64() const&;
  template <class T, size_t N, template <class U> class PtrTraits = std::add_pointer_t>
  GenericPackedTensorAccessor<T, N, int32_t> generic_packed_accessor32() const&;

  int64_t numel() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t sym_size(int64_t dim) const;
  int64_t dim() const;
  int64_t ndimension() const;
  IntArrayRef sizes() const;
  IntArrayRef strides() const;
  IntArrayRef sym_sizes() const;
  int64_t storage_offset() const;
  size_t nbytes() const;
  int64_t itemsize() const;
  int64_t element_size() const;
  TensorOptions options() const;
  TypeMeta dtype() const;
  ScalarType scalar_type() const;
  DeprecatedTypeProperties& type() const;
  Device device() const;
  int64_t get_device() const;
  Layout layout() const;
  bool is_cuda() const;
  bool is_cpu() const;
  bool is_meta() const;
  bool is_sparse() const;
  bool is_floating_point() const;
  bool is_complex() const;
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  bool is_non_overlapping_and_dense() const;
  bool defined() const;
  bool requires_grad() const;
  bool is_same(const Tensor& other) const;
  bool is_same_size(const Tensor& other) const;
  bool equal(const Tensor& other) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  std::string toString() const;
  void print() const;
  int64_t use_count() const;
  void reset();
  Tensor& grad();

  Tensor max() const;
  Tensor min() const;
  Tensor max(const Tensor& other) const;
  Tensor min(const Tensor& other) const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  template <class... Args>
  std::tuple<Tensor, Tensor> std_mean(Args&&... args) const;
  template <class... Args>
  std::tuple<Tensor, Tensor> var_mean(Args&&... args) const;
  std::vector<Tensor> split(int64_t size, int64_t dim = 0) const;
  std::vector<Tensor> split(IntArrayRef sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor to(ScalarType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor to(Device device, ScalarType dtype, bool non_blocking = false, bool copy = false) const;
  Tensor to(Device device, bool non_blocking = false, bool copy = false) const;
  Tensor to(TensorOptions options, bool non_blocking = false, bool copy = false) const;
  Tensor to(const Tensor& other, bool non_blocking = false, bool copy = false) const;
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(ArrayRef<indexing::TensorIndex> indices) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, Scalar value);
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  Tensor view(IntArrayRef size) const;
  Tensor view(ScalarType dtype) const;
  Tensor reshape(IntArrayRef size) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor expand(IntArrayRef size, bool implicit = false) const;
  Tensor repeat(IntArrayRef repeats) const;
  Tensor flip(IntArrayRef dims) const;
  Tensor sum(IntArrayRef dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor mean(IntArrayRef dims, bool keepdim = false, std::optional<ScalarType> dtype = std::nullopt) const;
  Tensor amax(IntArrayRef dims, bool keepdim = false) const;
  Tensor amin(IntArrayRef dims, bool keepdim = false) const;
  Tensor new_empty(IntArrayRef size, TensorOptions options = {}) const;
  Tensor new_zeros(IntArrayRef size, TensorOptions options = {}) const;
  Tensor new_ones(IntArrayRef size, TensorOptions options = {}) const;
  Tensor new_full(IntArrayRef size, Scalar value, TensorOptions options = {}) const;

// One declaration set per line, so that a compiler message quoting a line stays short. A
// braced list may stand first or second (sizes, dims).
#define CUSET_METHOD(name)                                                      \
  template <class... Args>                                                      \
  Tensor name(Args&&... args) const;                                            \
  template <class... Args>                                                      \
  Tensor name(IntArrayRef first, Args&&... args) const;                         \
  template <class A, class... Args>                                             \
  Tensor name(A&& first, IntArrayRef second, Args&&... args) const;
  #include "cuset_tensor_methods.def"
#undef CUSET_METHOD
  Tensor operator[](int64_t index) const;
  Tensor operator[](const Tensor& index) const;
  Tensor operator-() const;
  Tensor operator~() const;
  Tensor& operator+=(const Tensor& other);
  Tensor& operator-=(const Tensor& other);
  Tensor& operator*=(const Tensor& other);
  Tensor& operator/=(const Tensor& other);
  Tensor& operator+=(Scalar other);
  Tensor& operator-=(Scalar other);
  Tensor& operator*=(Scalar other);
  Tensor& operator/=(Scalar other);
  // A new reference to the torch.Tensor this handle stands for (tier 2's bridge); and the
  // storage sizes() and strides() point into.
  void* cuset_object = nullptr;
  mutable std::vector<int64_t> cuset_shape, cuset_strides;
};

#define CUSET_BINARY(op)                                      \
  Tensor operator op(const Tensor& a, const Tensor& b);       \
  Tensor operator op(const Tensor& a, Scalar b);              \
  Tensor operator op(Scalar a, const Tensor& b);
CUSET_BINARY(+)
CUSET_BINARY(-)
CUSET_BINARY(*)
CUSET_BINARY(/)
CUSET_BINARY(%)
CUSET_BINARY(<)
CUSET_BINARY(<=)
CUSET_BINARY(>)
CUSET_BINARY(>=)
CUSET_BINARY(==)
CUSET_BINARY(!=)
CUSET_BINARY(&)
CUSET_BINARY(|)
CUSET_BINARY(^)
CUSET_BINARY(&&)
CUSET_BINARY(||)
#undef CUSET_BINARY
std::ostream& operator<<(std::ostream& stream, const Tensor& tensor);
std::optional<Device> device_of(const Tensor& tensor);

// A result that is a tensor and, for reductions with indices, a (values, indices) pair.
struct OpResult : Tensor, std::tuple<Tensor, Tensor> {
  operator std::vector<Tensor>() const;
  std::vector<Tensor>::const_iterator begin() const;
  std::vector<Tensor>::const_iterator end() const;
  size_t size() const;
  using Tensor::size;
  Tensor operator[](size_t index) const;
  template <size_t I>
  Tensor get() const;
  std::vector<Tensor> cuset_items;
};

}  // namespace at

template <>
struct std::tuple_size<at::OpResult> : std::integral_constant<size_t, 2> {};
template <size_t I>
struct std::tuple_element<I, at::OpResult> {
  using type = at::Tensor;
};

namespace at {

// Free functions of at:: / torch::, one per line: any arguments; a braced list may stand
// first (sizes or tensors; an empty one picks the tensor overload, as good for type-checking),
// second or third (sizes, dims).
#define CUSET_FUNCTION(name)                                                                 \
  template <class... Args>                                                                   \
  OpResult name(Args&&... args);                                                             \
  template <class... Args>                                                                   \
  OpResult name(IntArrayRef first, Args&&... args);                                          \
  template <class... Args>                                                                   \
  OpResult name(std::initializer_list<Tensor> first, Args&&... args);                        \
  template <class... Args>                                                                   \
  OpResult name(IntArrayRef first, IntArrayRef second, Args&&... args);                      \
  template <class A, class... Args>                                                          \
  OpResult name(A&& first, IntArrayRef second, Args&&... args);                              \
  template <class A, class B, class... Args>                                                 \
  OpResult name(A&& first, B&& second, IntArrayRef third, Args&&... args);
#include "cuset_torch_functions.def"
#undef CUSET_FUNCTION

}  // namespace at

namespace torch {
using namespace at;
using at::indexing::Slice;
using IntArrayRef = c10::IntArrayRef;
namespace indexing = at::indexing;
using Dtype = c10::ScalarType;
template <class F>
F wrap_pybind_function(F function);
namespace autograd {
using Variable = at::Tensor;
template <class T>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args);
};
struct AutogradContext {
  void save_for_backward(std::vector<at::Tensor> tensors);
  std::vector<at::Tensor> get_saved_variables() const;
  void mark_dirty(std::vector<at::Tensor> tensors);
#if !defined(CUSET_STD_ON_DEMAND) || defined(CUSET_STD_UNORDERED_MAP)
  std::unordered_map<std::string, c10::Scalar> saved_data;
#endif
};
using variable_list = std::vector<at::Tensor>;
}  // namespace autograd
using autograd::AutogradContext;
using autograd::variable_list;
struct NoGradGuard {
  NoGradGuard();
};
struct InferenceMode {
  InferenceMode(bool enabled = true);
};
namespace nn {
struct Module {
  template <class... Args>
  at::Tensor forward(Args&&... args);
};
namespace functional {
#define CUSET_NN_FUNCTION(name) \
  template <class... Args>       \
  at::OpResult name(Args&&... args);
CUSET_NN_FUNCTION(conv1d)
CUSET_NN_FUNCTION(conv2d)
CUSET_NN_FUNCTION(conv3d)
CUSET_NN_FUNCTION(linear)
CUSET_NN_FUNCTION(relu)
CUSET_NN_FUNCTION(gelu)
CUSET_NN_FUNCTION(softmax)
CUSET_NN_FUNCTION(log_softmax)
CUSET_NN_FUNCTION(pad)
CUSET_NN_FUNCTION(batch_norm)
CUSET_NN_FUNCTION(layer_norm)
CUSET_NN_FUNCTION(group_norm)
CUSET_NN_FUNCTION(instance_norm)
CUSET_NN_FUNCTION(max_pool1d)
CUSET_NN_FUNCTION(max_pool2d)
CUSET_NN_FUNCTION(max_pool3d)
CUSET_NN_FUNCTION(avg_pool1d)
CUSET_NN_FUNCTION(avg_pool2d)
CUSET_NN_FUNCTION(avg_pool3d)
CUSET_NN_FUNCTION(adaptive_avg_pool1d)
CUSET_NN_FUNCTION(adaptive_avg_pool2d)
CUSET_NN_FUNCTION(adaptive_avg_pool3d)
CUSET_NN_FUNCTION(dropout)
CUSET_NN_FUNCTION(interpolate)
CUSET_NN_FUNCTION(conv_transpose1d)
CUSET_NN_FUNCTION(conv_transpose2d)
CUSET_NN_FUNCTION(conv_transpose3d)
CUSET_NN_FUNCTION(normalize)
CUSET_NN_FUNCTION(silu)
CUSET_NN_FUNCTION(mish)
CUSET_NN_FUNCTION(hardtanh)
CUSET_NN_FUNCTION(leaky_relu)
CUSET_NN_FUNCTION(elu)
CUSET_NN_FUNCTION(selu)
CUSET_NN_FUNCTION(softplus)
CUSET_NN_FUNCTION(cosine_similarity)
CUSET_NN_FUNCTION(cross_entropy)
CUSET_NN_FUNCTION(mse_loss)
#undef CUSET_NN_FUNCTION
struct AnyOptions {
  template <class... Args>
  AnyOptions(Args&&... args);
  AnyOptions(at::IntArrayRef sizes);
  template <class T>
  AnyOptions& operator()(T&&);
  template <class... Args>
  AnyOptions& stride(Args&&...);
  template <class... Args>
  AnyOptions& padding(Args&&...);
  template <class... Args>
  AnyOptions& dilation(Args&&...);
  template <class... Args>
  AnyOptions& groups(Args&&...);
  template <class... Args>
  AnyOptions& bias(Args&&...);
  template <class... Args>
  AnyOptions& weight(Args&&...);
  template <class... Args>
  AnyOptions& eps(Args&&...);
  template <class... Args>
  AnyOptions& momentum(Args&&...);
  template <class... Args>
  AnyOptions& training(Args&&...);
  template <class... Args>
  AnyOptions& mode(Args&&...);
  template <class... Args>
  AnyOptions& value(Args&&...);
  template <class... Args>
  AnyOptions& dim(Args&&...);
  template <class... Args>
  AnyOptions& output_padding(Args&&...);
  template <class... Args>
  AnyOptions& running_mean(Args&&...);
  template <class... Args>
  AnyOptions& running_var(Args&&...);
  template <class... Args>
  AnyOptions& ceil_mode(Args&&...);
  template <class... Args>
  AnyOptions& kernel_size(Args&&...);
  template <class... Args>
  AnyOptions& size(Args&&...);
  template <class... Args>
  AnyOptions& scale_factor(Args&&...);
  template <class... Args>
  AnyOptions& align_corners(Args&&...);
  template <class... Args>
  AnyOptions& p(Args&&...);
  template <class... Args>
  AnyOptions& negative_slope(Args&&...);
  template <class... Args>
  AnyOptions& min_val(Args&&...);
  template <class... Args>
  AnyOptions& max_val(Args&&...);
  template <class... Args>
  AnyOptions& count_include_pad(Args&&...);
  template <class... Args>
  AnyOptions& divisor_override(Args&&...);
};
using Conv1dFuncOptions = AnyOptions;
using Conv2dFuncOptions = AnyOptions;
using Conv3dFuncOptions = AnyOptions;
using ConvTranspose1dFuncOptions = AnyOptions;
using ConvTranspose2dFuncOptions = AnyOptions;
using ConvTranspose3dFuncOptions = AnyOptions;
using PadFuncOptions = AnyOptions;
using BatchNormFuncOptions = AnyOptions;
using LayerNormFuncOptions = AnyOptions;
using GroupNormFuncOptions = AnyOptions;
using InstanceNormFuncOptions = AnyOptions;
using MaxPool1dFuncOptions = AnyOptions;
using MaxPool2dFuncOptions = AnyOptions;
using MaxPool3dFuncOptions = AnyOptions;
using AvgPool1dFuncOptions = AnyOptions;
using AvgPool2dFuncOptions = AnyOptions;
using AvgPool3dFuncOptions = AnyOptions;
using AdaptiveAvgPool2dFuncOptions = AnyOptions;
using SoftmaxFuncOptions = AnyOptions;
using LogSoftmaxFuncOptions = AnyOptions;
using DropoutFuncOptions = AnyOptions;
using InterpolateFuncOptions = AnyOptions;
using NormalizeFuncOptions = AnyOptions;
using GELUFuncOptions = AnyOptions;
using HardtanhFuncOptions = AnyOptions;
using LeakyReLUFuncOptions = AnyOptions;
using ELUFuncOptions = AnyOptions;
using SoftplusFuncOptions = AnyOptions;
using CosineSimilarityFuncOptions = AnyOptions;
}  // namespace functional
}  // namespace nn
}  // namespace torch

// pybind11, as far as extension modules use it.
namespace pybind11 {
class object {
 public:
  object();
  void* cuset_object = nullptr;
  template <class T>
  T cast() const;
  template <class... Args>
  object attr(Args&&...) const;
  template <class... Args>
  object operator()(Args&&...) const;
  bool is_none() const;
};
class handle : public object {};
class none : public object {};
class tuple : public object {};
class list : public object {};
class dict : public object {};
class str : public object {
 public:
  str(const char*);
  str(const std::string&);
};
class function : public object {};
class arg {
 public:
  explicit arg(const char* name);
  template <class T>
  arg& operator=(T&& value);
  const char* cuset_name = nullptr;
};
template <class T, class... Options>
class class_ {
 public:
  template <class... Args>
  class_(Args&&...);
  template <class... Args>
  class_& def(Args&&...);
  template <class... Args>
  class_& def_readwrite(Args&&...);
  template <class... Args>
  class_& def_readonly(Args&&...);
  template <class... Args>
  class_& def_property(Args&&...);
  template <class... Args>
  class_& def_static(Args&&...);
};
template <class... Args>
struct init {};
class module_ : public object {
 public:
  template <class... Args>
  module_& def(Args&&...);
  module_ def_submodule(const char* name, const char* doc = nullptr);
  template <class... Args>
  module_& attr(Args&&...);
  static module_ import(const char* name);
  const char* doc;
};
using module = module_;
enum class return_value_policy { automatic, reference, reference_internal, copy, move, take_ownership };
template <class T>
object cast(T&& value);
namespace literals {
arg operator""_a(const char* name, size_t);
}
struct gil_scoped_release {};
struct gil_scoped_acquire {};
}  // namespace pybind11
namespace py = pybind11;

#define PYBIND11_MODULE(name, variable)             \
  static void cuset_pybind11_init(::pybind11::module_& variable); \
  extern "C" void* cuset_pybind11_entry() {         \
    return reinterpret_cast<void*>(&cuset_pybind11_init); \
  }                                                 \
  void cuset_pybind11_init(::pybind11::module_& variable)
#define TORCH_LIBRARY(ns, m) static void cuset_torch_library_##ns(::pybind11::module_& m)
#define TORCH_LIBRARY_IMPL(ns, k, m) static void cuset_torch_library_impl_##ns##_##k(::pybind11::module_& m)

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME cuset_extension
#endif

#define TORCH_CHECK(cond, ...)                                                \
  do {                                                                        \
    if (!(cond)) ::c10::detail::torch_check_fail(__FILE__, __LINE__, ##__VA_ARGS__); \
  } while (0)
#define TORCH_CHECK_VALUE(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_CHECK_TYPE(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_CHECK_INDEX(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_CHECK_NOT_IMPLEMENTED(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_CHECK_ARG(cond, argN, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_CHECK_EQ(a, b) TORCH_CHECK((a) == (b))
#define TORCH_CHECK_NE(a, b) TORCH_CHECK((a) != (b))
#define TORCH_CHECK_LE(a, b) TORCH_CHECK((a) <= (b))
#define TORCH_CHECK_LT(a, b) TORCH_CHECK((a) < (b))
#define TORCH_CHECK_GE(a, b) TORCH_CHECK((a) >= (b))
#define TORCH_CHECK_GT(a, b) TORCH_CHECK((a) > (b))
#define TORCH_INTERNAL_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_INTERNAL_ASSERT_DEBUG_ONLY(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define TORCH_WARN(...) ::c10::detail::torch_warn(__FILE__, __LINE__, ##__VA_ARGS__)
#define TORCH_WARN_ONCE(...) TORCH_WARN(__VA_ARGS__)
#define AT_ASSERT(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define AT_ASSERTM(cond, ...) TORCH_CHECK(cond, ##__VA_ARGS__)
#define AT_ERROR(...) ::c10::detail::torch_check_fail(__FILE__, __LINE__, ##__VA_ARGS__)
#define C10_THROW_ERROR(err_type, msg) throw ::c10::err_type()
#define CUSET_DISPATCH_CASE(enum_type, ...)                                  \
  case ::c10::ScalarType::enum_type: {                                       \
    using scalar_t [[maybe_unused]] = ::c10::ScalarTypeToCPPTypeT<::c10::ScalarType::enum_type>; \
    return __VA_ARGS__();                                                    \
  }
#define CUSET_DISPATCH_CASE_VALUE(value, ...)                                \
  case value: {                                                              \
    using scalar_t [[maybe_unused]] = ::c10::ScalarTypeToCPPTypeT<value>;   \
    return __VA_ARGS__();                                                    \
  }
#define CUSET_DISPATCH(TYPE, NAME, CASES)                                    \
  [&] {                                                                      \
    switch (static_cast<::c10::ScalarType>(TYPE)) {                          \
      CASES                                                                  \
      default:                                                               \
        ::c10::detail::torch_check_fail(__FILE__, __LINE__, NAME, " not implemented"); \
    }                                                                        \
  }()
#define CUSET_FLOATING_CASES(...) CUSET_DISPATCH_CASE(Double, __VA_ARGS__) CUSET_DISPATCH_CASE(Float, __VA_ARGS__)
#define CUSET_INTEGRAL_CASES(...)                                                            \
  CUSET_DISPATCH_CASE(Byte, __VA_ARGS__) CUSET_DISPATCH_CASE(Char, __VA_ARGS__)               \
  CUSET_DISPATCH_CASE(Int, __VA_ARGS__) CUSET_DISPATCH_CASE(Long, __VA_ARGS__)                \
  CUSET_DISPATCH_CASE(Short, __VA_ARGS__)

#define AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...) \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND_HALF(TYPE, NAME, ...) \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_DISPATCH_CASE(Half, __VA_ARGS__))
#define AT_DISPATCH_REDUCED_FLOATING_TYPES(TYPE, NAME, ...) \
  CUSET_DISPATCH(TYPE, NAME, CUSET_DISPATCH_CASE(Half, __VA_ARGS__) CUSET_DISPATCH_CASE(BFloat16, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND(S1, TYPE, NAME, ...) \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_DISPATCH_CASE_VALUE(S1, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND2(S1, S2, TYPE, NAME, ...)                                      \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_DISPATCH_CASE_VALUE(S1, __VA_ARGS__) \
                 CUSET_DISPATCH_CASE_VALUE(S2, __VA_ARGS__))
#define AT_DISPATCH_FLOATING_TYPES_AND3(S1, S2, S3, TYPE, NAME, ...)                                  \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_DISPATCH_CASE_VALUE(S1, __VA_ARGS__) \
                 CUSET_DISPATCH_CASE_VALUE(S2, __VA_ARGS__) CUSET_DISPATCH_CASE_VALUE(S3, __VA_ARGS__))
#define AT_DISPATCH_INTEGRAL_TYPES(TYPE, NAME, ...) \
  CUSET_DISPATCH(TYPE, NAME, CUSET_INTEGRAL_CASES(__VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES(TYPE, NAME, ...) \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_INTEGRAL_CASES(__VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES_AND(S1, TYPE, NAME, ...)                                                  \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_INTEGRAL_CASES(__VA_ARGS__) \
                 CUSET_DISPATCH_CASE_VALUE(S1, __VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES_AND2(S1, S2, TYPE, NAME, ...)                                             \
  CUSET_DISPATCH(TYPE, NAME, CUSET_FLOATING_CASES(__VA_ARGS__) CUSET_INTEGRAL_CASES(__VA_ARGS__) \
                 CUSET_DISPATCH_CASE_VALUE(S1, __VA_ARGS__) CUSET_DISPATCH_CASE_VALUE(S2, __VA_ARGS__))
#define AT_DISPATCH_ALL_TYPES_AND_HALF(TYPE, NAME, ...) AT_DISPATCH_ALL_TYPES_AND(::c10::ScalarType::Half, TYPE, NAME, __VA_ARGS__)
#define AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES(TYPE, NAME, ...) AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, __VA_ARGS__)
#define AT_DISPATCH_CASE(enum_type, ...) CUSET_DISPATCH_CASE_VALUE(enum_type, __VA_ARGS__)
#define AT_DISPATCH_CASE_FLOATING_TYPES(...) CUSET_FLOATING_CASES(__VA_ARGS__)
#define AT_DISPATCH_SWITCH(TYPE, NAME, ...) CUSET_DISPATCH(TYPE, NAME, __VA_ARGS__)
