// Tier 2's torch bridge: definitions for the light stand-in of the PyTorch C++ API
// (verify/stubs/light/cuset_torch_light.h, which tier 1 compiles against), so that a candidate
// extension builds in about a second instead of instantiating ATen's templates.
//
// A Tensor is a handle to a torch.Tensor object. Metadata (sizes, dtype, data pointer) is read
// from that object; every operation (torch::empty, x.sum(1), a + b) is a call into
// cuset_core/verify/cpu/torch_bridge.py, which runs the aten operator of that name, so the
// semantics are torch's own. PYBIND11_MODULE makes a CPython module whose functions convert
// their arguments as pybind11 does for the types extensions use.
//
// What is not defined here stays declared only: an extension that uses it leaves an undefined
// symbol of at::, c10::, torch:: or pybind11::, and the build falls back to ATen's headers
// (cpu/build.py). The Tensor methods and functions that take any arguments are defined for the
// names this torch can run (cuset_bridge_ops.inc, written with the precompiled prelude).
#pragma once
#include <Python.h>

#include <cuset_torch_light.h>

#include <cstring>
#include <functional>
#include <memory>

namespace cuset {
namespace bridge {

struct Gil {
  PyGILState_STATE state = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(state); }
};

// Turns the pending Python exception into a c10::Error carrying its message.
[[noreturn]] inline void raise_python_error() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  std::string message = "torch operation failed";
  if (value) {
    if (PyObject* text = PyObject_Str(value)) {
      if (const char* utf8 = PyUnicode_AsUTF8(text)) message = utf8;
      Py_DECREF(text);
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  throw c10::Error(message);
}

inline PyObject* checked(PyObject* result) {
  if (!result) raise_python_error();
  return result;
}

// An owned reference.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* object) : object_(object) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  Ref(Ref&& other) noexcept : object_(other.object_) { other.object_ = nullptr; }
  ~Ref() { Py_XDECREF(object_); }
  PyObject* get() const { return object_; }
  PyObject* release() {
    PyObject* object = object_;
    object_ = nullptr;
    return object;
  }

 private:
  PyObject* object_ = nullptr;
};

inline PyObject* helpers() {
  static PyObject* module = checked(PyImport_ImportModule("cuset_core.verify.cpu.torch_bridge"));
  return module;
}

inline Ref call_helper(const char* name, PyObject* args) {
  Ref function(checked(PyObject_GetAttrString(helpers(), name)));
  return Ref(checked(PyObject_CallObject(function.get(), args)));
}

inline PyObject* table(const char* name) {  // a tuple the helpers compute once
  Ref empty(checked(PyTuple_New(0)));
  return call_helper(name, empty.get()).release();
}

inline PyObject* dtype_object(c10::ScalarType type) {
  static PyObject* dtypes = table("dtypes");
  auto index = static_cast<Py_ssize_t>(type);
  PyObject* dtype = index >= 0 && index < PyTuple_GET_SIZE(dtypes) ? PyTuple_GET_ITEM(dtypes, index) : Py_None;
  Py_INCREF(dtype);
  return dtype;
}

inline c10::ScalarType scalar_type_of(PyObject* dtype) {
  static PyObject* dtypes = table("dtypes");
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dtypes); ++i) {
    if (PyTuple_GET_ITEM(dtypes, i) == dtype) return static_cast<c10::ScalarType>(i);
  }
  return c10::ScalarType::Undefined;
}

// The torch device a C++ DeviceType names (torch_bridge.device): the CPU on tier 2, except CUDA
// behind the device boundary, where the candidate's device tensors say "cuda".
inline PyObject* device_object(c10::DeviceType type) {
  static PyObject* devices[3] = {nullptr, nullptr, nullptr};
  int slot = type == c10::DeviceType::CUDA ? 1 : type == c10::DeviceType::Meta ? 2 : 0;
  if (!devices[slot]) {
    Gil gil;
    Ref args(checked(Py_BuildValue("(i)", static_cast<int>(type))));
    devices[slot] = call_helper("device", args.get()).release();
  }
  Py_INCREF(devices[slot]);
  return devices[slot];
}

inline PyObject* object_of(const at::Tensor& tensor) { return static_cast<PyObject*>(tensor.cuset_object); }

inline bool is_tensor(PyObject* object) {
  static PyObject* tensor_type = [] {
    Ref torch(checked(PyImport_ImportModule("torch")));
    return checked(PyObject_GetAttrString(torch.get(), "Tensor"));
  }();
  return PyObject_IsInstance(object, tensor_type) == 1;
}

inline at::Tensor adopt(PyObject* object) {  // steals a reference
  at::Tensor tensor;
  if (object == Py_None) {
    Py_DECREF(object);
    return tensor;
  }
  if (!is_tensor(object)) {
    Py_DECREF(object);
    throw c10::Error("a torch operation returned something other than a tensor");
  }
  tensor.cuset_object = object;
  return tensor;
}

// ---------------------------------------------------------------- C++ values to Python
PyObject* to_py(const at::Tensor& value);
PyObject* to_py(c10::ScalarType value);
PyObject* to_py(const c10::TypeMeta& value);
PyObject* to_py(const c10::Device& value);
PyObject* to_py(c10::DeviceType value);
PyObject* to_py(c10::MemoryFormat value);
PyObject* to_py(const c10::TensorOptions& value);
PyObject* to_py(const c10::Scalar& value);
PyObject* to_py(std::nullopt_t);
PyObject* to_py(const char* value);
PyObject* to_py(const std::string& value);
PyObject* to_py(bool value);
PyObject* to_py(c10::Half value);
PyObject* to_py(c10::BFloat16 value);
template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
PyObject* to_py(T value) {
  return checked(PyLong_FromLongLong(static_cast<long long>(value)));
}
template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
PyObject* to_py(T value) {
  return checked(PyFloat_FromDouble(static_cast<double>(value)));
}
template <class T>
PyObject* to_py(const std::optional<T>& value);
template <class T>
PyObject* to_py(c10::ArrayRef<T> values);
template <class T>
PyObject* to_py(const std::vector<T>& values);
template <class T>
PyObject* to_py(std::initializer_list<T> values);
template <class T, size_t N>
PyObject* to_py(const std::array<T, N>& values);

inline PyObject* to_py(const at::Tensor& value) {
  PyObject* object = value.cuset_object ? object_of(value) : Py_None;
  Py_INCREF(object);
  return object;
}
inline PyObject* to_py(c10::ScalarType value) { return dtype_object(value); }
inline PyObject* to_py(const c10::TypeMeta& value) { return dtype_object(value.cuset_type); }
inline PyObject* to_py(const c10::Device& value) { return device_object(value.type()); }
inline PyObject* to_py(c10::DeviceType value) { return device_object(value); }
inline PyObject* to_py(c10::MemoryFormat value) {
  static PyObject* formats = table("memory_formats");
  PyObject* format = PyTuple_GET_ITEM(formats, static_cast<Py_ssize_t>(value));
  Py_INCREF(format);
  return format;
}
inline PyObject* to_py(const c10::TensorOptions& value) {
  Ref args(checked(Py_BuildValue("(ii)", value.cuset_dtype ? static_cast<int>(*value.cuset_dtype) : -1,
                                 value.cuset_device ? static_cast<int>(value.cuset_device->type()) : -1)));
  return call_helper("Options", args.get()).release();
}
inline PyObject* to_py(const c10::Scalar& value) {
  if (value.cuset_type == c10::ScalarType::Bool) return to_py(value.cuset_long != 0);
  if (value.isFloatingPoint()) return to_py(value.cuset_double);
  return to_py(value.cuset_long);
}
inline PyObject* to_py(std::nullopt_t) { Py_RETURN_NONE; }
inline PyObject* to_py(const char* value) { return checked(PyUnicode_FromString(value)); }
inline PyObject* to_py(const std::string& value) { return checked(PyUnicode_FromStringAndSize(value.data(), value.size())); }
inline PyObject* to_py(bool value) { return checked(PyBool_FromLong(value)); }
inline PyObject* to_py(c10::Half value) { return to_py(static_cast<double>(static_cast<float>(value))); }
inline PyObject* to_py(c10::BFloat16 value) { return to_py(static_cast<double>(static_cast<float>(value))); }
template <class T>
PyObject* to_py(const std::optional<T>& value) {
  if (!value) Py_RETURN_NONE;
  return to_py(*value);
}
template <class Iterable>
PyObject* list_of(const Iterable& values) {
  Ref list(checked(PyList_New(0)));
  for (const auto& value : values) {
    Ref item(to_py(value));
    if (PyList_Append(list.get(), item.get()) != 0) raise_python_error();
  }
  return list.release();
}
template <class T>
PyObject* to_py(c10::ArrayRef<T> values) {
  return list_of(values);
}
template <class T>
PyObject* to_py(const std::vector<T>& values) {
  return list_of(values);
}
template <class T>
PyObject* to_py(std::initializer_list<T> values) {
  return list_of(values);
}
template <class T, size_t N>
PyObject* to_py(const std::array<T, N>& values) {
  return list_of(values);
}

// Runs the torch operation `name` on C++ arguments (self first for a method).
template <class... Args>
Ref call_torch(const char* name, bool method, const Args&... args) {
  Gil gil;
  Ref arguments(checked(PyTuple_New(sizeof...(Args))));
  Py_ssize_t index = 0;
  ((PyTuple_SET_ITEM(arguments.get(), index++, to_py(args))), ...);
  Ref call(checked(Py_BuildValue("(sOO)", name, arguments.get(), method ? Py_True : Py_False)));
  return call_helper("call", call.get());
}

inline at::Tensor tensor_result(Ref result) { return adopt(result.release()); }

at::OpResult op_result(Ref result);

inline at::Tensor binary(const char* op, PyObject* a, PyObject* b) {
  Gil gil;
  Ref args(checked(Py_BuildValue("(sNN)", op, a, b)));
  return adopt(call_helper("binary", args.get()).release());
}

inline Ref attribute(const at::Tensor& tensor, const char* name) {
  if (!tensor.cuset_object) throw c10::Error(std::string("undefined tensor: ") + name + "() needs a defined tensor");
  Gil gil;
  return Ref(checked(PyObject_GetAttrString(object_of(tensor), name)));
}

inline Ref method(const at::Tensor& tensor, const char* name) {
  if (!tensor.cuset_object) throw c10::Error(std::string("undefined tensor: ") + name + "() needs a defined tensor");
  Gil gil;
  return Ref(checked(PyObject_CallMethod(object_of(tensor), name, nullptr)));
}

inline int64_t as_long(Ref value) {
  long long result = PyLong_AsLongLong(value.get());
  if (result == -1 && PyErr_Occurred()) raise_python_error();
  return result;
}

inline bool as_bool(Ref value) {
  int truth = PyObject_IsTrue(value.get());
  if (truth < 0) raise_python_error();
  return truth == 1;
}

inline void read_ints(PyObject* sequence, std::vector<int64_t>& into) {
  Ref items(checked(PySequence_Fast(sequence, "expected a sequence of ints")));
  Py_ssize_t count = PySequence_Fast_GET_SIZE(items.get());
  into.resize(count);
  for (Py_ssize_t i = 0; i < count; ++i) {
    long long value = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items.get(), i));
    if (value == -1 && PyErr_Occurred()) raise_python_error();
    into[i] = value;
  }
}

template <class T>
struct ScalarTypeOf;
#define CUSET_SCALAR_TYPE_OF(cpp, name) \
  template <>                           \
  struct ScalarTypeOf<cpp> {            \
    static constexpr c10::ScalarType value = c10::ScalarType::name; \
  };
CUSET_SCALAR_TYPE_OF(uint8_t, Byte)
CUSET_SCALAR_TYPE_OF(int8_t, Char)
CUSET_SCALAR_TYPE_OF(int16_t, Short)
CUSET_SCALAR_TYPE_OF(int, Int)
CUSET_SCALAR_TYPE_OF(int64_t, Long)
CUSET_SCALAR_TYPE_OF(c10::Half, Half)
CUSET_SCALAR_TYPE_OF(float, Float)
CUSET_SCALAR_TYPE_OF(double, Double)
CUSET_SCALAR_TYPE_OF(bool, Bool)
CUSET_SCALAR_TYPE_OF(c10::BFloat16, BFloat16)
CUSET_SCALAR_TYPE_OF(uint16_t, UInt16)
CUSET_SCALAR_TYPE_OF(uint32_t, UInt32)
CUSET_SCALAR_TYPE_OF(uint64_t, UInt64)
#undef CUSET_SCALAR_TYPE_OF

}  // namespace bridge
}  // namespace cuset

// ---------------------------------------------------------------- c10
namespace c10 {
inline namespace cuset_stand_in {  // the stand-in's own (cuset_torch_light.h says why)

inline const char* toString(ScalarType t) {
  static const char* names[] = {"Byte", "Char", "Short", "Int", "Long", "Half", "Float", "Double", "ComplexHalf",
                                "ComplexFloat", "ComplexDouble", "Bool", "QInt8", "QUInt8", "QInt32", "BFloat16",
                                "Float8_e5m2", "Float8_e4m3fn", "UInt16", "UInt32", "UInt64"};
  auto index = static_cast<size_t>(t);
  return index < sizeof(names) / sizeof(names[0]) ? names[index] : "Undefined";
}
inline size_t elementSize(ScalarType t) {
  static const size_t sizes[] = {1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1, 4, 2, 1, 1, 2, 4, 8};
  auto index = static_cast<size_t>(t);
  TORCH_CHECK(index < sizeof(sizes) / sizeof(sizes[0]), "elementSize of an undefined ScalarType");
  return sizes[index];
}
inline bool isFloatingType(ScalarType t) {
  return t == ScalarType::Half || t == ScalarType::Float || t == ScalarType::Double || t == ScalarType::BFloat16 ||
         t == ScalarType::Float8_e5m2 || t == ScalarType::Float8_e4m3fn;
}
inline bool isIntegralType(ScalarType t, bool include_bool) {
  return t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short || t == ScalarType::Int ||
         t == ScalarType::Long || t == ScalarType::UInt16 || t == ScalarType::UInt32 || t == ScalarType::UInt64 ||
         (include_bool && t == ScalarType::Bool);
}
inline bool isComplexType(ScalarType t) {
  return t == ScalarType::ComplexHalf || t == ScalarType::ComplexFloat || t == ScalarType::ComplexDouble;
}

inline Device::Device(DeviceType type, DeviceIndex index) : cuset_type(type), cuset_index(index) {}
inline Device::Device(const std::string& spec) : Device(spec.c_str()) {}
inline Device::Device(const char* spec) {
  std::string text(spec);
  cuset_type = text.rfind("cuda", 0) == 0 ? DeviceType::CUDA : DeviceType::CPU;
  auto colon = text.find(':');
  if (colon != std::string::npos) cuset_index = static_cast<DeviceIndex>(std::stoi(text.substr(colon + 1)));
}
inline DeviceType Device::type() const noexcept { return cuset_type; }
inline DeviceIndex Device::index() const noexcept { return cuset_index; }
inline bool Device::has_index() const noexcept { return cuset_index >= 0; }
inline bool Device::is_cuda() const noexcept { return cuset_type == DeviceType::CUDA; }
inline bool Device::is_cpu() const noexcept { return cuset_type == DeviceType::CPU; }
inline std::string Device::str() const {
  std::string name = cuset_type == DeviceType::CUDA ? "cuda" : cuset_type == DeviceType::CPU ? "cpu" : "meta";
  return has_index() ? name + ":" + std::to_string(cuset_index) : name;
}
inline bool Device::operator==(const Device& other) const noexcept {
  return cuset_type == other.cuset_type && cuset_index == other.cuset_index;
}
inline bool Device::operator!=(const Device& other) const noexcept { return !(*this == other); }
inline std::ostream& operator<<(std::ostream& stream, const Device& device) { return stream << device.str(); }

template <class T>
bool ArrayRef<T>::equals(ArrayRef other) const {
  return size_ == other.size_ && std::equal(begin(), end(), other.begin());
}
template <class T>
bool ArrayRef<T>::operator==(ArrayRef other) const {
  return equals(other);
}
template <class T>
bool ArrayRef<T>::operator!=(ArrayRef other) const {
  return !equals(other);
}
template <class T>
std::ostream& operator<<(std::ostream& stream, ArrayRef<T> values) {
  stream << "[";
  for (size_t i = 0; i < values.size(); ++i) stream << (i ? ", " : "") << values[i];
  return stream << "]";
}

// IEEE binary16 and bfloat16, rounded to nearest even as c10 rounds.
inline Half::Half(float value) {
  _Float16 half = static_cast<_Float16>(value);
  std::memcpy(&x, &half, sizeof x);
}
inline Half::operator float() const {
  _Float16 half;
  std::memcpy(&half, &x, sizeof x);
  return static_cast<float>(half);
}
inline BFloat16::BFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) {
    x = 0x7FC0;
  } else {
    bits += 0x7FFF + ((bits >> 16) & 1);
    x = static_cast<unsigned short>(bits >> 16);
  }
}
inline BFloat16::operator float() const {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline Scalar::Scalar() = default;
template <class T, class>
Scalar::Scalar(T value) {
  if constexpr (std::is_same_v<T, bool>) {
    cuset_long = value;
    cuset_type = ScalarType::Bool;
  } else if constexpr (std::is_floating_point_v<T>) {
    cuset_double = static_cast<double>(value);
    cuset_type = ScalarType::Double;
  } else {
    cuset_long = static_cast<int64_t>(value);
    cuset_double = static_cast<double>(value);
    cuset_type = ScalarType::Long;
  }
}
inline Scalar::Scalar(Half value) : Scalar(static_cast<double>(static_cast<float>(value))) {}
inline Scalar::Scalar(BFloat16 value) : Scalar(static_cast<double>(static_cast<float>(value))) {}
inline double Scalar::toDouble() const { return isFloatingPoint() ? cuset_double : static_cast<double>(cuset_long); }
inline float Scalar::toFloat() const { return static_cast<float>(toDouble()); }
inline int64_t Scalar::toLong() const { return isFloatingPoint() ? static_cast<int64_t>(cuset_double) : cuset_long; }
inline int Scalar::toInt() const { return static_cast<int>(toLong()); }
inline bool Scalar::toBool() const { return isFloatingPoint() ? cuset_double != 0 : cuset_long != 0; }
inline Half Scalar::toHalf() const { return Half(toFloat()); }
template <class T>
T Scalar::to() const {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(toDouble());
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(toFloat());
  else return static_cast<T>(toLong());
}
inline bool Scalar::isFloatingPoint() const { return cuset_type == ScalarType::Double; }
inline bool Scalar::isIntegral(bool include_bool) const {
  return cuset_type == ScalarType::Long || (include_bool && cuset_type == ScalarType::Bool);
}
inline ScalarType Scalar::type() const { return cuset_type; }

inline TypeMeta::TypeMeta() = default;
inline TypeMeta::TypeMeta(ScalarType type) : cuset_type(type) {}
inline TypeMeta::operator ScalarType() const { return cuset_type; }
inline ScalarType TypeMeta::toScalarType() const { return cuset_type; }
inline size_t TypeMeta::itemsize() const { return elementSize(cuset_type); }
inline const char* TypeMeta::name() const { return toString(cuset_type); }
template <class T>
bool TypeMeta::Match() const {
  return cuset_type == ::cuset::bridge::ScalarTypeOf<T>::value;
}
template <class T>
TypeMeta TypeMeta::Make() {
  return TypeMeta(::cuset::bridge::ScalarTypeOf<T>::value);
}
inline bool TypeMeta::operator==(const TypeMeta& other) const { return cuset_type == other.cuset_type; }
inline bool TypeMeta::operator!=(const TypeMeta& other) const { return cuset_type != other.cuset_type; }
inline bool TypeMeta::operator==(ScalarType other) const { return cuset_type == other; }
inline bool TypeMeta::operator!=(ScalarType other) const { return cuset_type != other; }
inline std::ostream& operator<<(std::ostream& stream, const TypeMeta& meta) { return stream << meta.name(); }
inline ScalarType typeMetaToScalarType(TypeMeta meta) { return meta.cuset_type; }

inline TensorOptions::TensorOptions() = default;
inline TensorOptions::TensorOptions(ScalarType dtype) : cuset_dtype(dtype) {}
inline TensorOptions::TensorOptions(TypeMeta dtype) : cuset_dtype(dtype.cuset_type) {}
inline TensorOptions::TensorOptions(Device device) : cuset_device(device) {}
inline TensorOptions::TensorOptions(DeviceType device) : cuset_device(Device(device)) {}
inline TensorOptions::TensorOptions(Layout) {}
inline TensorOptions TensorOptions::dtype(ScalarType dtype) const {
  TensorOptions options = *this;
  options.cuset_dtype = dtype;
  return options;
}
inline TensorOptions TensorOptions::dtype(TypeMeta dtype) const { return this->dtype(dtype.cuset_type); }
inline TensorOptions TensorOptions::dtype(std::optional<ScalarType> dtype) const {
  TensorOptions options = *this;
  options.cuset_dtype = dtype;
  return options;
}
template <class T>
TensorOptions TensorOptions::dtype() const {
  return dtype(::cuset::bridge::ScalarTypeOf<T>::value);
}
inline TypeMeta TensorOptions::dtype() const { return TypeMeta(cuset_dtype.value_or(ScalarType::Float)); }
inline TensorOptions TensorOptions::device(Device device) const {
  TensorOptions options = *this;
  options.cuset_device = device;
  return options;
}
inline TensorOptions TensorOptions::device(DeviceType type, DeviceIndex index) const {
  return device(Device(type, index));
}
inline TensorOptions TensorOptions::device(std::optional<Device> device) const {
  TensorOptions options = *this;
  options.cuset_device = device;
  return options;
}
inline Device TensorOptions::device() const { return cuset_device.value_or(Device(DeviceType::CPU)); }
inline TensorOptions TensorOptions::device_index(DeviceIndex index) const { return device(DeviceType::CUDA, index); }
inline DeviceIndex TensorOptions::device_index() const { return device().index(); }
inline TensorOptions TensorOptions::layout(Layout) const { return *this; }
inline Layout TensorOptions::layout() const { return Layout::Strided; }
inline TensorOptions TensorOptions::requires_grad(bool value) const {
  TensorOptions options = *this;
  options.cuset_requires_grad = value;
  return options;
}
inline bool TensorOptions::requires_grad() const { return cuset_requires_grad; }
inline TensorOptions TensorOptions::pinned_memory(bool) const { return *this; }
inline bool TensorOptions::pinned_memory() const { return false; }
inline TensorOptions dtype(ScalarType dtype) { return TensorOptions().dtype(dtype); }
inline TensorOptions dtype(TypeMeta dtype) { return TensorOptions().dtype(dtype); }
template <class T>
TensorOptions dtype() {
  return TensorOptions().dtype<T>();
}
inline TensorOptions device(Device device) { return TensorOptions().device(device); }
inline TensorOptions device(DeviceType type, DeviceIndex index) { return TensorOptions().device(type, index); }
inline TensorOptions device_index(DeviceIndex index) { return TensorOptions().device_index(index); }
inline TensorOptions layout(Layout layout) { return TensorOptions().layout(layout); }
inline TensorOptions requires_grad(bool value) { return TensorOptions().requires_grad(value); }

inline const char* Error::what() const noexcept { return cuset_message.c_str(); }
inline const char* Error::what_without_backtrace() const noexcept { return cuset_message.c_str(); }
inline std::string Error::msg() const { return cuset_message; }

template <class... Args>
std::string str(Args&&... args) {
  std::ostringstream stream;
  (stream << ... << args);
  return stream.str();
}

namespace detail {
template <class... Args>
[[noreturn]] void torch_check_fail(const char* file, int line, Args&&... args) {
  std::string message = ::c10::str(std::forward<Args>(args)...);
  if (message.empty()) message = std::string("Expected a check to hold at ") + file + ":" + std::to_string(line);
  throw ::c10::Error(message);
}
template <class... Args>
void torch_warn(const char* file, int line, Args&&... args) {
  std::cerr << "Warning: " << ::c10::str(std::forward<Args>(args)...) << " (" << file << ":" << line << ")\n";
}
}  // namespace detail

}  // namespace cuset_stand_in
}  // namespace c10

// ---------------------------------------------------------------- at::Tensor
namespace at {

inline Tensor::Tensor() = default;
inline Tensor::Tensor(const Tensor& other) : cuset_object(other.cuset_object) {
  Py_XINCREF(static_cast<PyObject*>(cuset_object));
}
inline Tensor::Tensor(Tensor&& other) noexcept : cuset_object(other.cuset_object) { other.cuset_object = nullptr; }
inline Tensor& Tensor::operator=(const Tensor& other) & {
  Py_XINCREF(static_cast<PyObject*>(other.cuset_object));
  Py_XDECREF(static_cast<PyObject*>(cuset_object));
  cuset_object = other.cuset_object;
  return *this;
}
inline Tensor& Tensor::operator=(Tensor&& other) & {
  std::swap(cuset_object, other.cuset_object);
  return *this;
}
inline Tensor::~Tensor() {
  if (cuset_object && Py_IsInitialized()) {
    ::cuset::bridge::Gil gil;
    Py_DECREF(static_cast<PyObject*>(cuset_object));
  }
}
inline Tensor& Tensor::operator=(const Tensor& other) && {
  ::cuset::bridge::call_torch("copy_", true, *this, other);
  return *this;
}
inline Tensor& Tensor::operator=(Scalar value) && {
  ::cuset::bridge::call_torch("fill_", true, *this, value);
  return *this;
}

inline void* Tensor::data_ptr() const {
  return reinterpret_cast<void*>(static_cast<intptr_t>(::cuset::bridge::as_long(::cuset::bridge::method(*this, "data_ptr"))));
}
template <class T>
T* Tensor::data_ptr() const {
  ScalarType expected = ::cuset::bridge::ScalarTypeOf<std::remove_const_t<T>>::value;
  ScalarType found = scalar_type();
  TORCH_CHECK(found == expected, "expected scalar type ", ::c10::toString(expected), " but found ",
              ::c10::toString(found));
  return static_cast<T*>(data_ptr());
}
inline void* Tensor::mutable_data_ptr() const { return data_ptr(); }
template <class T>
T* Tensor::mutable_data_ptr() const {
  return data_ptr<T>();
}
inline const void* Tensor::const_data_ptr() const { return data_ptr(); }
template <class T>
const T* Tensor::const_data_ptr() const {
  return data_ptr<T>();
}
template <class T>
T* Tensor::data() const {
  return data_ptr<T>();
}
template <class T>
T Tensor::item() const {
  return item().to<T>();
}
inline Scalar Tensor::item() const {
  ::cuset::bridge::Ref value = ::cuset::bridge::method(*this, "item");
  ::cuset::bridge::Gil gil;
  if (PyBool_Check(value.get())) return Scalar(value.get() == Py_True);
  if (PyFloat_Check(value.get())) return Scalar(PyFloat_AsDouble(value.get()));
  return Scalar(::cuset::bridge::as_long(std::move(value)));
}

template <class T, size_t N, template <class U> class PtrTraits, class index_t>
GenericPackedTensorAccessor<T, N, index_t> Tensor::packed_accessor() const& {
  TORCH_CHECK(dim() == static_cast<int64_t>(N), "TensorAccessor expected ", N, " dims but tensor has ", dim());
  index_t sizes_n[N], strides_n[N];
  for (size_t d = 0; d < N; ++d) {
    sizes_n[d] = static_cast<index_t>(sizes()[d]);
    strides_n[d] = static_cast<index_t>(strides()[d]);
  }
  return GenericPackedTensorAccessor<T, N, index_t>(data_ptr<T>(), sizes_n, strides_n);
}
template <class T, size_t N, template <class U> class PtrTraits>
GenericPackedTensorAccessor<T, N, int32_t> Tensor::packed_accessor32() const& {
  return packed_accessor<T, N, PtrTraits, int32_t>();
}
template <class T, size_t N, template <class U> class PtrTraits>
GenericPackedTensorAccessor<T, N, int64_t> Tensor::packed_accessor64() const& {
  return packed_accessor<T, N, PtrTraits, int64_t>();
}
template <class T, size_t N, template <class U> class PtrTraits>
GenericPackedTensorAccessor<T, N, int32_t> Tensor::generic_packed_accessor32() const& {
  return packed_accessor<T, N, PtrTraits, int32_t>();
}

inline int64_t Tensor::numel() const { return ::cuset::bridge::as_long(::cuset::bridge::method(*this, "numel")); }
inline int64_t Tensor::dim() const { return ::cuset::bridge::as_long(::cuset::bridge::method(*this, "dim")); }
inline int64_t Tensor::ndimension() const { return dim(); }
inline IntArrayRef Tensor::sizes() const {
  ::cuset::bridge::Ref shape = ::cuset::bridge::attribute(*this, "shape");
  ::cuset::bridge::Gil gil;
  ::cuset::bridge::read_ints(shape.get(), cuset_shape);
  return IntArrayRef(cuset_shape.data(), cuset_shape.size());
}
inline IntArrayRef Tensor::strides() const {
  ::cuset::bridge::Ref strides = ::cuset::bridge::method(*this, "stride");
  ::cuset::bridge::Gil gil;
  ::cuset::bridge::read_ints(strides.get(), cuset_strides);
  return IntArrayRef(cuset_strides.data(), cuset_strides.size());
}
inline IntArrayRef Tensor::sym_sizes() const { return sizes(); }
inline int64_t Tensor::size(int64_t dim) const {
  IntArrayRef shape = sizes();
  int64_t rank = static_cast<int64_t>(shape.size());
  TORCH_CHECK(dim >= -rank && dim < rank, "Dimension out of range (expected to be in range of [", -rank, ", ",
              rank - 1, "], but got ", dim, ")");
  return shape[dim < 0 ? dim + rank : dim];
}
inline int64_t Tensor::sym_size(int64_t dim) const { return size(dim); }
inline int64_t Tensor::stride(int64_t dim) const {
  IntArrayRef all = strides();
  int64_t rank = static_cast<int64_t>(all.size());
  TORCH_CHECK(dim >= -rank && dim < rank, "Dimension out of range (expected to be in range of [", -rank, ", ",
              rank - 1, "], but got ", dim, ")");
  return all[dim < 0 ? dim + rank : dim];
}
inline int64_t Tensor::storage_offset() const {
  return ::cuset::bridge::as_long(::cuset::bridge::method(*this, "storage_offset"));
}
inline int64_t Tensor::element_size() const { return static_cast<int64_t>(elementSize(scalar_type())); }
inline int64_t Tensor::itemsize() const { return element_size(); }
inline size_t Tensor::nbytes() const { return static_cast<size_t>(numel() * element_size()); }
inline ScalarType Tensor::scalar_type() const {
  ::cuset::bridge::Ref dtype = ::cuset::bridge::attribute(*this, "dtype");
  return ::cuset::bridge::scalar_type_of(dtype.get());
}
inline TypeMeta Tensor::dtype() const { return TypeMeta(scalar_type()); }
inline Device Tensor::device() const {
  ::cuset::bridge::Gil gil;  // first: the references below are released before it is
  ::cuset::bridge::Ref device = ::cuset::bridge::attribute(*this, "device");
  ::cuset::bridge::Ref type(::cuset::bridge::checked(PyObject_GetAttrString(device.get(), "type")));
  const char* name = PyUnicode_AsUTF8(type.get());
  return Device(name && std::strcmp(name, "cuda") == 0 ? DeviceType::CUDA : DeviceType::CPU);
}
inline int64_t Tensor::get_device() const { return is_cuda() ? 0 : -1; }
inline Layout Tensor::layout() const { return Layout::Strided; }
inline TensorOptions Tensor::options() const { return TensorOptions(scalar_type()).device(device()); }
inline bool Tensor::is_cuda() const { return device().is_cuda(); }
inline bool Tensor::is_cpu() const { return device().is_cpu(); }
inline bool Tensor::is_meta() const { return false; }
inline bool Tensor::is_sparse() const { return false; }
inline bool Tensor::is_floating_point() const { return isFloatingType(scalar_type()); }
inline bool Tensor::is_complex() const { return isComplexType(scalar_type()); }
inline bool Tensor::is_contiguous(MemoryFormat format) const {
  return ::cuset::bridge::as_bool(::cuset::bridge::call_torch("is_contiguous", true, *this, format));
}
inline bool Tensor::is_non_overlapping_and_dense() const { return is_contiguous(); }
inline bool Tensor::defined() const { return cuset_object != nullptr; }
inline bool Tensor::requires_grad() const { return ::cuset::bridge::as_bool(::cuset::bridge::attribute(*this, "requires_grad")); }
inline bool Tensor::is_same(const Tensor& other) const { return cuset_object == other.cuset_object; }
inline bool Tensor::is_same_size(const Tensor& other) const { return sizes().vec() == other.sizes().vec(); }
inline bool Tensor::equal(const Tensor& other) const {
  return ::cuset::bridge::as_bool(::cuset::bridge::call_torch("equal", true, *this, other));
}
inline bool Tensor::allclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return ::cuset::bridge::as_bool(::cuset::bridge::call_torch("allclose", true, *this, other, rtol, atol, equal_nan));
}
inline std::string Tensor::toString() const {
  ::cuset::bridge::Gil gil;
  ::cuset::bridge::Ref text(::cuset::bridge::checked(PyObject_Str(static_cast<PyObject*>(cuset_object))));
  return PyUnicode_AsUTF8(text.get());
}
inline void Tensor::print() const { std::cout << toString() << std::endl; }
inline void Tensor::reset() { *this = Tensor(); }
inline std::ostream& operator<<(std::ostream& stream, const Tensor& tensor) { return stream << tensor.toString(); }

#define CUSET_T ::cuset::bridge::tensor_result
#define CUSET_CALL ::cuset::bridge::call_torch
inline Tensor Tensor::max() const { return CUSET_T(CUSET_CALL("max", true, *this)); }
inline Tensor Tensor::min() const { return CUSET_T(CUSET_CALL("min", true, *this)); }
inline Tensor Tensor::max(const Tensor& other) const { return CUSET_T(CUSET_CALL("maximum", true, *this, other)); }
inline Tensor Tensor::min(const Tensor& other) const { return CUSET_T(CUSET_CALL("minimum", true, *this, other)); }
inline std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return ::cuset::bridge::op_result(CUSET_CALL("max", true, *this, dim, keepdim));
}
inline std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return ::cuset::bridge::op_result(CUSET_CALL("min", true, *this, dim, keepdim));
}
inline std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return ::cuset::bridge::op_result(CUSET_CALL("sort", true, *this, dim, descending));
}
inline std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return ::cuset::bridge::op_result(CUSET_CALL("topk", true, *this, k, dim, largest, sorted));
}
inline std::vector<Tensor> Tensor::split(int64_t size, int64_t dim) const {
  return ::cuset::bridge::op_result(CUSET_CALL("split", true, *this, size, dim));
}
inline std::vector<Tensor> Tensor::split(IntArrayRef sizes, int64_t dim) const {
  return ::cuset::bridge::op_result(CUSET_CALL("split_with_sizes", true, *this, sizes, dim));
}
inline std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return ::cuset::bridge::op_result(CUSET_CALL("chunk", true, *this, chunks, dim));
}
inline std::vector<Tensor> Tensor::unbind(int64_t dim) const {
  return ::cuset::bridge::op_result(CUSET_CALL("unbind", true, *this, dim));
}
inline Tensor Tensor::to(ScalarType dtype, bool non_blocking, bool copy) const {
  return CUSET_T(CUSET_CALL("to", true, *this, dtype, non_blocking, copy));
}
inline Tensor Tensor::to(Device, ScalarType dtype, bool non_blocking, bool copy) const {
  return CUSET_T(CUSET_CALL("to", true, *this, dtype, non_blocking, copy));
}
inline Tensor Tensor::to(Device, bool, bool copy) const { return copy ? CUSET_T(CUSET_CALL("clone", true, *this)) : *this; }
inline Tensor Tensor::to(TensorOptions options, bool, bool copy) const {
  Tensor result = options.cuset_dtype ? to(*options.cuset_dtype) : *this;
  return copy && result.is_same(*this) ? CUSET_T(CUSET_CALL("clone", true, *this)) : result;
}
inline Tensor Tensor::to(const Tensor& other, bool non_blocking, bool copy) const {
  return to(other.scalar_type(), non_blocking, copy);
}
inline Tensor Tensor::contiguous(MemoryFormat format) const { return CUSET_T(CUSET_CALL("contiguous", true, *this, format)); }
inline Tensor Tensor::view(IntArrayRef size) const { return CUSET_T(CUSET_CALL("view", true, *this, size)); }
inline Tensor Tensor::view(ScalarType dtype) const { return CUSET_T(CUSET_CALL("view", true, *this, dtype)); }
inline Tensor Tensor::reshape(IntArrayRef size) const { return CUSET_T(CUSET_CALL("reshape", true, *this, size)); }
inline Tensor Tensor::permute(IntArrayRef dims) const { return CUSET_T(CUSET_CALL("permute", true, *this, dims)); }
inline Tensor Tensor::expand(IntArrayRef size, bool implicit) const {
  return CUSET_T(CUSET_CALL("expand", true, *this, size, implicit));
}
inline Tensor Tensor::repeat(IntArrayRef repeats) const { return CUSET_T(CUSET_CALL("repeat", true, *this, repeats)); }
inline Tensor Tensor::flip(IntArrayRef dims) const { return CUSET_T(CUSET_CALL("flip", true, *this, dims)); }
inline Tensor Tensor::sum(IntArrayRef dims, bool keepdim, std::optional<ScalarType> dtype) const {
  return CUSET_T(CUSET_CALL("sum", true, *this, dims, keepdim, dtype));
}
inline Tensor Tensor::mean(IntArrayRef dims, bool keepdim, std::optional<ScalarType> dtype) const {
  return CUSET_T(CUSET_CALL("mean", true, *this, dims, keepdim, dtype));
}
inline Tensor Tensor::amax(IntArrayRef dims, bool keepdim) const { return CUSET_T(CUSET_CALL("amax", true, *this, dims, keepdim)); }
inline Tensor Tensor::amin(IntArrayRef dims, bool keepdim) const { return CUSET_T(CUSET_CALL("amin", true, *this, dims, keepdim)); }
inline Tensor Tensor::new_empty(IntArrayRef size, TensorOptions options) const {
  return CUSET_T(CUSET_CALL("new_empty", true, *this, size, options));
}
inline Tensor Tensor::new_zeros(IntArrayRef size, TensorOptions options) const {
  return CUSET_T(CUSET_CALL("new_zeros", true, *this, size, options));
}
inline Tensor Tensor::new_ones(IntArrayRef size, TensorOptions options) const {
  return CUSET_T(CUSET_CALL("new_ones", true, *this, size, options));
}
inline Tensor Tensor::new_full(IntArrayRef size, Scalar value, TensorOptions options) const {
  return CUSET_T(CUSET_CALL("new_full", true, *this, size, value, options));
}
inline Tensor Tensor::operator[](int64_t index) const { return CUSET_T(CUSET_CALL("select", true, *this, 0, index)); }
inline Tensor Tensor::operator-() const { return CUSET_T(CUSET_CALL("neg", true, *this)); }
inline Tensor Tensor::operator~() const { return CUSET_T(CUSET_CALL("bitwise_not", true, *this)); }
#define CUSET_COMPOUND(op, name)                                      \
  inline Tensor& Tensor::operator op(const Tensor& other) {           \
    CUSET_CALL(name, true, *this, other);                             \
    return *this;                                                     \
  }                                                                   \
  inline Tensor& Tensor::operator op(Scalar other) {                  \
    CUSET_CALL(name, true, *this, other);                             \
    return *this;                                                     \
  }
CUSET_COMPOUND(+=, "add_")
CUSET_COMPOUND(-=, "sub_")
CUSET_COMPOUND(*=, "mul_")
CUSET_COMPOUND(/=, "div_")
#undef CUSET_COMPOUND

// Generic methods: for every name this torch runs (the others stay declared only).
#define CUSET_METHOD(name)                                                                \
  template <class... Args>                                                                \
  Tensor Tensor::name(Args&&... args) const {                                             \
    return CUSET_T(CUSET_CALL(#name, true, *this, args...));                              \
  }                                                                                       \
  template <class... Args>                                                                \
  Tensor Tensor::name(IntArrayRef first, Args&&... args) const {                          \
    return CUSET_T(CUSET_CALL(#name, true, *this, first, args...));                       \
  }                                                                                       \
  template <class A, class... Args>                                                       \
  Tensor Tensor::name(A&& first, IntArrayRef second, Args&&... args) const {              \
    return CUSET_T(CUSET_CALL(#name, true, *this, first, second, args...));               \
  }
#define CUSET_FUNCTION(name)                                                              \
  template <class... Args>                                                                \
  OpResult name(Args&&... args) {                                                         \
    return ::cuset::bridge::op_result(CUSET_CALL(#name, false, args...));                 \
  }                                                                                       \
  template <class... Args>                                                                \
  OpResult name(IntArrayRef first, Args&&... args) {                                      \
    return ::cuset::bridge::op_result(CUSET_CALL(#name, false, first, args...));          \
  }                                                                                       \
  template <class... Args>                                                                \
  OpResult name(std::initializer_list<Tensor> first, Args&&... args) {                    \
    return ::cuset::bridge::op_result(CUSET_CALL(#name, false, first, args...));          \
  }                                                                                       \
  template <class... Args>                                                                \
  OpResult name(IntArrayRef first, IntArrayRef second, Args&&... args) {                  \
    return ::cuset::bridge::op_result(CUSET_CALL(#name, false, first, second, args...));  \
  }                                                                                       \
  template <class A, class... Args>                                                       \
  OpResult name(A&& first, IntArrayRef second, Args&&... args) {                          \
    return ::cuset::bridge::op_result(CUSET_CALL(#name, false, first, second, args...));  \
  }                                                                                       \
  template <class A, class B, class... Args>                                              \
  OpResult name(A&& first, B&& second, IntArrayRef third, Args&&... args) {               \
    return ::cuset::bridge::op_result(CUSET_CALL(#name, false, first, second, third, args...)); \
  }
#include "cuset_bridge_ops.inc"
#undef CUSET_METHOD
#undef CUSET_FUNCTION

#define CUSET_BINARY(op, name)                                                                    \
  inline Tensor operator op(const Tensor& a, const Tensor& b) {                                   \
    return ::cuset::bridge::binary(name, ::cuset::bridge::to_py(a), ::cuset::bridge::to_py(b));   \
  }                                                                                               \
  inline Tensor operator op(const Tensor& a, Scalar b) {                                          \
    return ::cuset::bridge::binary(name, ::cuset::bridge::to_py(a), ::cuset::bridge::to_py(b));   \
  }                                                                                               \
  inline Tensor operator op(Scalar a, const Tensor& b) {                                          \
    return ::cuset::bridge::binary(name, ::cuset::bridge::to_py(a), ::cuset::bridge::to_py(b));   \
  }
CUSET_BINARY(+, "add")
CUSET_BINARY(-, "sub")
CUSET_BINARY(*, "mul")
CUSET_BINARY(/, "truediv")
CUSET_BINARY(%, "mod")
CUSET_BINARY(<, "lt")
CUSET_BINARY(<=, "le")
CUSET_BINARY(>, "gt")
CUSET_BINARY(>=, "ge")
CUSET_BINARY(==, "eq")
CUSET_BINARY(!=, "ne")
CUSET_BINARY(&, "and_")
CUSET_BINARY(|, "or_")
CUSET_BINARY(^, "xor")
CUSET_BINARY(&&, "logical_and")
CUSET_BINARY(||, "logical_or")
#undef CUSET_BINARY
#undef CUSET_T
#undef CUSET_CALL

inline OpResult::operator std::vector<Tensor>() const { return cuset_items; }
inline std::vector<Tensor>::const_iterator OpResult::begin() const { return cuset_items.begin(); }
inline std::vector<Tensor>::const_iterator OpResult::end() const { return cuset_items.end(); }
inline size_t OpResult::size() const { return cuset_items.size(); }
inline Tensor OpResult::operator[](size_t index) const {
  TORCH_CHECK(index < cuset_items.size(), "index ", index, " is out of range of ", cuset_items.size(), " results");
  return cuset_items[index];
}
template <size_t I>
Tensor OpResult::get() const {
  return (*this)[I];
}

}  // namespace at

namespace cuset {
namespace bridge {

inline at::OpResult op_result(Ref result) {
  at::OpResult out;
  Gil gil;
  if (PyTuple_Check(result.get()) || PyList_Check(result.get())) {
    Ref items(checked(PySequence_Fast(result.get(), "a sequence")));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items.get()); ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(items.get(), i);
      Py_INCREF(item);
      out.cuset_items.push_back(adopt(item));
    }
    if (!out.cuset_items.empty()) static_cast<at::Tensor&>(out) = out.cuset_items[0];
    if (out.cuset_items.size() >= 2) {
      static_cast<std::tuple<at::Tensor, at::Tensor>&>(out) = {out.cuset_items[0], out.cuset_items[1]};
    }
    return out;
  }
  static_cast<at::Tensor&>(out) = adopt(result.release());
  out.cuset_items.push_back(out);
  return out;
}

// ---------------------------------------------------------------- pybind11 module functions
// Python arguments to C++ parameters, as pybind11 converts them; a parameter type not listed has
// no Caster, so the build falls back to ATen's headers.
template <class T, class = void>
struct Caster;
template <>
struct Caster<at::Tensor> {
  at::Tensor value;
  bool load(PyObject* object) {
    if (!is_tensor(object)) return false;
    Py_INCREF(object);
    value = adopt(object);
    return true;
  }
  at::Tensor& get() { return value; }
};
template <class T>
struct Caster<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  T value{};
  bool load(PyObject* object) {
    if (PyFloat_Check(object)) return false;
    long long number = PyLong_AsLongLong(object);
    if (number == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    value = static_cast<T>(number);
    return true;
  }
  T get() { return value; }
};
template <class T>
struct Caster<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  T value{};
  bool load(PyObject* object) {
    double number = PyFloat_AsDouble(object);
    if (number == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    value = static_cast<T>(number);
    return true;
  }
  T get() { return value; }
};
template <>
struct Caster<bool> {
  bool value = false;
  bool load(PyObject* object) {
    if (!PyBool_Check(object)) return false;
    value = object == Py_True;
    return true;
  }
  bool get() { return value; }
};
template <>
struct Caster<std::string> {
  std::string value;
  bool load(PyObject* object) {
    const char* text = PyUnicode_Check(object) ? PyUnicode_AsUTF8(object) : nullptr;
    if (!text) return false;
    value = text;
    return true;
  }
  std::string& get() { return value; }
};
template <>
struct Caster<c10::Scalar> {
  c10::Scalar value;
  bool load(PyObject* object) {
    if (PyBool_Check(object)) value = c10::Scalar(object == Py_True);
    else if (PyLong_Check(object)) value = c10::Scalar(static_cast<int64_t>(PyLong_AsLongLong(object)));
    else if (PyFloat_Check(object)) value = c10::Scalar(PyFloat_AsDouble(object));
    else return false;
    return true;
  }
  c10::Scalar get() { return value; }
};
template <class T>
struct Caster<std::vector<T>> {
  std::vector<T> value;
  bool load(PyObject* object) {
    if (!PyList_Check(object) && !PyTuple_Check(object)) return false;
    for (Py_ssize_t i = 0; i < PySequence_Size(object); ++i) {
      Ref item(PySequence_GetItem(object, i));
      Caster<T> caster;
      if (!item.get() || !caster.load(item.get())) return false;
      value.push_back(caster.get());
    }
    return true;
  }
  std::vector<T>& get() { return value; }
};
template <class T>
struct Caster<c10::ArrayRef<T>> {
  Caster<std::vector<T>> items;
  bool load(PyObject* object) { return items.load(object); }
  c10::ArrayRef<T> get() { return c10::ArrayRef<T>(items.value); }
};
template <class T>
struct Caster<std::optional<T>> {
  std::optional<T> value;
  bool load(PyObject* object) {
    if (object == Py_None) return true;
    Caster<T> caster;
    if (!caster.load(object)) return false;
    value = caster.get();
    return true;
  }
  std::optional<T>& get() { return value; }
};

// C++ results to Python.
inline PyObject* result_to_py(const at::Tensor& value) { return to_py(value); }
template <class T>
PyObject* result_to_py(const T& value);
template <class... T>
PyObject* result_to_py(const std::tuple<T...>& values) {
  Ref tuple(checked(PyTuple_New(sizeof...(T))));
  std::apply(
      [&](const auto&... items) {
        Py_ssize_t index = 0;
        ((PyTuple_SET_ITEM(tuple.get(), index++, result_to_py(items))), ...);
      },
      values);
  return tuple.release();
}
template <class A, class B>
PyObject* result_to_py(const std::pair<A, B>& values) {
  return result_to_py(std::tuple<A, B>(values.first, values.second));
}
template <class T>
PyObject* result_to_py(const std::vector<T>& values) {
  Ref list(checked(PyList_New(0)));
  for (const auto& value : values) {
    Ref item(result_to_py(value));
    if (PyList_Append(list.get(), item.get()) != 0) raise_python_error();
  }
  return list.release();
}
template <class T>
PyObject* result_to_py(const T& value) {
  return to_py(value);
}

template <class F>
struct Signature : Signature<decltype(&F::operator())> {};
template <class R, class... A>
struct Signature<R (*)(A...)> {
  using Result = R;
  using Arguments = std::tuple<A...>;
};
template <class R, class... A>
struct Signature<R(A...)> : Signature<R (*)(A...)> {};
template <class C, class R, class... A>
struct Signature<R (C::*)(A...) const> : Signature<R (*)(A...)> {};
template <class C, class R, class... A>
struct Signature<R (C::*)(A...)> : Signature<R (*)(A...)> {};

template <class F, class R, class... A, size_t... I>
PyObject* invoke(F& function, PyObject* args, const std::string& name, std::tuple<A...>*, std::index_sequence<I...>) {
  std::tuple<Caster<std::decay_t<A>>...> casters;
  if (PyTuple_GET_SIZE(args) != static_cast<Py_ssize_t>(sizeof...(A)) ||
      !(std::get<I>(casters).load(PyTuple_GET_ITEM(args, I)) && ...)) {
    PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments (%zd given, %zu expected)", name.c_str(),
                 PyTuple_GET_SIZE(args), sizeof...(A));
    return nullptr;
  }
  if constexpr (std::is_void_v<R>) {
    function(std::get<I>(casters).get()...);
    Py_RETURN_NONE;
  } else {
    return result_to_py(function(std::get<I>(casters).get()...));
  }
}

struct Binding {
  std::string name;
  std::vector<std::string> keywords;
  std::function<PyObject*(PyObject*)> call;
  PyMethodDef definition{};
};

// Keyword arguments placed where py::arg names them.
inline PyObject* positional(const Binding& binding, PyObject* args, PyObject* kwargs) {
  if (!kwargs || PyDict_Size(kwargs) == 0) {
    Py_INCREF(args);
    return args;
  }
  Ref list(checked(PySequence_List(args)));
  for (size_t i = PyList_GET_SIZE(list.get()); i < binding.keywords.size(); ++i) {
    PyObject* value = PyDict_GetItemString(kwargs, binding.keywords[i].c_str());
    if (!value) break;
    if (PyList_Append(list.get(), value) != 0) return nullptr;
  }
  if (PyList_GET_SIZE(list.get()) - PyTuple_GET_SIZE(args) != PyDict_Size(kwargs)) {
    PyErr_Format(PyExc_TypeError, "%s(): unexpected keyword arguments", binding.name.c_str());
    return nullptr;
  }
  return PyList_AsTuple(list.get());
}

inline PyObject* dispatch(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* binding = static_cast<Binding*>(PyCapsule_GetPointer(self, nullptr));
  if (!binding) return nullptr;
  try {
    Ref arguments(positional(*binding, args, kwargs));
    if (!arguments.get()) return nullptr;
    return binding->call(arguments.get());
  } catch (const c10::Error& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
  return nullptr;
}

inline void collect(Binding&) {}
template <class... Rest>
void collect(Binding& binding, const char*, Rest&&... rest) {  // a docstring
  collect(binding, rest...);
}
template <class... Rest>
void collect(Binding& binding, const pybind11::arg& arg, Rest&&... rest) {
  binding.keywords.push_back(arg.cuset_name);
  collect(binding, rest...);
}
template <class... Rest>
void collect(Binding& binding, pybind11::return_value_policy, Rest&&... rest) {
  collect(binding, rest...);
}

template <class F, class... Extra>
void define(pybind11::module_& module, const char* name, F&& function, Extra&&... extra) {
  using Plain = std::decay_t<F>;
  using Info = Signature<std::remove_pointer_t<Plain>>;
  auto* binding = new Binding();  // lives as long as the module, i.e. the process
  binding->name = name;
  collect(*binding, extra...);
  binding->call = [function = Plain(function), name = binding->name](PyObject* args) mutable -> PyObject* {
    using Arguments = typename Info::Arguments;
    return invoke<Plain, typename Info::Result>(function, args, name, static_cast<Arguments*>(nullptr),
                                                std::make_index_sequence<std::tuple_size_v<Arguments>>());
  };
  binding->definition.ml_name = binding->name.c_str();
  binding->definition.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&dispatch));
  binding->definition.ml_flags = METH_VARARGS | METH_KEYWORDS;
  Ref capsule(checked(PyCapsule_New(binding, nullptr, nullptr)));
  Ref callable(checked(PyCFunction_NewEx(&binding->definition, capsule.get(), nullptr)));
  if (PyModule_AddObjectRef(static_cast<PyObject*>(module.cuset_object), name, callable.get()) != 0) raise_python_error();
}

inline PyObject* make_module(const char* name, void (*init)(pybind11::module_&)) {
  auto* definition = new PyModuleDef{PyModuleDef_HEAD_INIT, name, nullptr, -1, nullptr, nullptr, nullptr, nullptr, nullptr};
  PyObject* created = PyModule_Create(definition);
  if (!created) return nullptr;
  pybind11::module_ module;
  module.cuset_object = created;
  try {
    init(module);
  } catch (const std::exception& error) {
    Py_DECREF(created);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, error.what());
    return nullptr;
  }
  return created;
}

}  // namespace bridge
}  // namespace cuset

inline pybind11::object::object() = default;
inline pybind11::arg::arg(const char* name) : cuset_name(name) {}
template <class... Args>
pybind11::module_& pybind11::module_::def(Args&&... args) {
  ::cuset::bridge::define(*this, std::forward<Args>(args)...);
  return *this;
}

#define CUSET_BRIDGE_JOIN2(a, b) a##b
#define CUSET_BRIDGE_JOIN(a, b) CUSET_BRIDGE_JOIN2(a, b)
#define CUSET_BRIDGE_TEXT2(a) #a
#define CUSET_BRIDGE_TEXT(a) CUSET_BRIDGE_TEXT2(a)
#undef PYBIND11_MODULE
#define PYBIND11_MODULE(name, variable)                                                       \
  static void cuset_pybind11_init(::pybind11::module_& variable);                             \
  extern "C" __attribute__((visibility("default"))) PyObject* CUSET_BRIDGE_JOIN(PyInit_, name)() { \
    return ::cuset::bridge::make_module(CUSET_BRIDGE_TEXT(name), &cuset_pybind11_init);       \
  }                                                                                           \
  void cuset_pybind11_init(::pybind11::module_& variable)
// Operator registration needs torch's dispatcher: such an extension is built on ATen's headers.
#undef TORCH_LIBRARY
#undef TORCH_LIBRARY_IMPL
