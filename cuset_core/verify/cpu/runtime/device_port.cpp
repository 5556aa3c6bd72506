// The host side of tier 2's device boundary (cuset_core/verify/cpu/device/): the candidate's host
// process reaches device memory and launches kernels only through this port, a socket to the
// device process, which owns the memory and runs the kernels. cuda_cpu.h routes the runtime API
// here (weak references) once the harness opened the port; without it, everything runs in the
// process as before.
//
// Frames, both ways: u32 header length, u64 payload length, the header (JSON text), the payload
// (raw bytes). One request, one reply, under a lock: Python (torch operations) and C++ (the
// runtime API) share the socket.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

extern "C" int cuset_arena_owns(const void* p);  // guarded_allocator.cpp

namespace {

int port_fd = -1;
std::mutex& port_lock() {
  static std::mutex m;
  return m;
}

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t done = write(fd, p, n);
    if (done <= 0) return false;
    p += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t done = read(fd, p, n);
    if (done <= 0) return false;
    p += done;
    n -= static_cast<size_t>(done);
  }
  return true;
}

// The device process is gone: nothing the host does can matter any more.
[[noreturn]] void port_lost() {
  static const char message[] = "cuset runtime: the device process is gone\n";
  ssize_t ignored = write(2, message, sizeof message - 1);
  (void)ignored;
  _exit(86);
}

// The number after "key": in a reply header, or `otherwise`.
long long field(const std::string& header, const char* key, long long otherwise = 0) {
  std::string needle = std::string("\"") + key + "\":";
  size_t at = header.find(needle);
  if (at == std::string::npos) return otherwise;
  return std::strtoll(header.c_str() + at + needle.size(), nullptr, 10);
}

struct Reply {
  std::string header;
  std::string payload;
};

Reply request(const std::string& header, const void* payload = nullptr, size_t payload_len = 0) {
  std::lock_guard<std::mutex> guard(port_lock());
  uint32_t header_len = static_cast<uint32_t>(header.size());
  uint64_t length = payload_len;
  if (!write_all(port_fd, &header_len, sizeof header_len) || !write_all(port_fd, &length, sizeof length) ||
      !write_all(port_fd, header.data(), header.size()) || (payload_len && !write_all(port_fd, payload, payload_len)))
    port_lost();
  Reply reply;
  if (!read_all(port_fd, &header_len, sizeof header_len) || !read_all(port_fd, &length, sizeof length)) port_lost();
  reply.header.resize(header_len);
  reply.payload.resize(length);
  if (!read_all(port_fd, reply.header.data(), header_len) || (length && !read_all(port_fd, reply.payload.data(), length)))
    port_lost();
  return reply;
}

// Which library holds `address`, and where in it: what the device process needs to find the same
// place in its own copy of that library.
bool locate(const void* address, std::string& library, uintptr_t& offset) {
  Dl_info info{};
  if (!dladdr(address, &info) || !info.dli_fname) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  library = slash ? slash + 1 : info.dli_fname;
  offset = reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase);
  return true;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void cuset_port_open(int fd) { port_fd = fd; }
extern "C" __attribute__((visibility("default"))) int cuset_port_is_open() { return port_fd >= 0; }

// The generic request of the Python side (torch operations); the reply's parts are malloc'd and
// freed with cuset_port_release. Returns 0.
extern "C" __attribute__((visibility("default"))) int cuset_port_request(const char* header, size_t header_len,
                                                                         const void* payload, size_t payload_len,
                                                                         char** reply_header, size_t* reply_header_len,
                                                                         char** reply_payload, size_t* reply_payload_len) {
  Reply reply = request(std::string(header, header_len), payload, payload_len);
  *reply_header_len = reply.header.size();
  *reply_payload_len = reply.payload.size();
  *reply_header = static_cast<char*>(std::malloc(reply.header.size() + 1));
  *reply_payload = static_cast<char*>(std::malloc(reply.payload.size() + 1));
  std::memcpy(*reply_header, reply.header.data(), reply.header.size());
  std::memcpy(*reply_payload, reply.payload.data(), reply.payload.size());
  return 0;
}
extern "C" __attribute__((visibility("default"))) void cuset_port_release(void* p) { std::free(p); }

// The runtime API of cuda_cpu.h on the host side. Each returns a cudaError_t value (0: success);
// the device process checks every address it is given.
extern "C" __attribute__((visibility("default"))) int cuset_port_malloc(void** p, size_t bytes) {
  Reply reply = request("{\"op\": \"malloc\", \"bytes\": " + std::to_string(bytes) + "}");
  *p = reinterpret_cast<void*>(static_cast<uintptr_t>(field(reply.header, "ptr")));
  return static_cast<int>(field(reply.header, "error_code"));
}

extern "C" __attribute__((visibility("default"))) int cuset_port_free(void* p) {
  Reply reply = request("{\"op\": \"free\", \"ptr\": " + std::to_string(reinterpret_cast<uintptr_t>(p)) + "}");
  return static_cast<int>(field(reply.header, "error_code"));
}

// A stream's fields in a request: its handle (0: the legacy default stream) and whether it was
// created cudaStreamNonBlocking. The device process runs the work when the stream's order allows.
static std::string on_stream(unsigned long long stream, int nonblocking) {
  return ", \"stream\": " + std::to_string(stream) + ", \"nonblocking\": " + (nonblocking ? "true" : "false");
}

extern "C" __attribute__((visibility("default"))) int cuset_port_memcpy(void* dst, const void* src, size_t n,
                                                                        unsigned long long stream, int nonblocking) {
  bool to_device = cuset_arena_owns(dst), from_device = cuset_arena_owns(src);
  std::string where = "\"dst\": " + std::to_string(reinterpret_cast<uintptr_t>(dst)) +
                      ", \"src\": " + std::to_string(reinterpret_cast<uintptr_t>(src)) + ", \"n\": " + std::to_string(n) +
                      on_stream(stream, nonblocking);
  if (to_device && from_device) return static_cast<int>(field(request("{\"op\": \"d2d\", " + where + "}").header, "error_code"));
  if (to_device) return static_cast<int>(field(request("{\"op\": \"h2d\", " + where + "}", src, n).header, "error_code"));
  if (from_device) {
    Reply reply = request("{\"op\": \"d2h\", " + where + "}");
    if (reply.payload.size() == n) std::memcpy(dst, reply.payload.data(), n);
    return static_cast<int>(field(reply.header, "error_code"));
  }
  std::memmove(dst, src, n);
  return 0;
}

extern "C" __attribute__((visibility("default"))) int cuset_port_memset(void* dst, int value, size_t n,
                                                                        unsigned long long stream, int nonblocking) {
  Reply reply = request("{\"op\": \"memset\", \"dst\": " + std::to_string(reinterpret_cast<uintptr_t>(dst)) +
                        ", \"value\": " + std::to_string(value) + ", \"n\": " + std::to_string(n) +
                        on_stream(stream, nonblocking) + "}");
  return static_cast<int>(field(reply.header, "error_code"));
}

// A kernel launch: `entry` is the launch site's cuset::detail::remote_entry instantiation, `args`
// its bound arguments. The device process runs the same entry of its copy of the library.
// `offsets` says where each of the kernel's `count` arguments starts in `args`, for the device
// process to name an argument it refuses (cpu/device/containment.py).
extern "C" __attribute__((visibility("default"))) int cuset_port_launch(
    const void* entry, const void* args, size_t args_len, const size_t* offsets, size_t count, unsigned gx, unsigned gy,
    unsigned gz, unsigned bx, unsigned by, unsigned bz, size_t smem, const char* name, unsigned long long stream,
    int nonblocking) {
  std::string library;
  uintptr_t offset = 0;
  if (!locate(entry, library, offset)) return 98;  // cudaErrorInvalidDeviceFunction
  char numbers[256];
  std::snprintf(numbers, sizeof numbers,
                "\"entry\": %" PRIuPTR ", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"smem\": %zu", offset, gx,
                gy, gz, bx, by, bz, smem);
  std::string arguments = ", \"arguments\": [";
  for (size_t i = 0; i < count; ++i) arguments += (i ? ", " : "") + std::to_string(offsets[i]);
  Reply reply = request("{\"op\": \"launch\", \"library\": " + quoted(library) + ", \"name\": " + quoted(name) + ", " +
                            numbers + arguments + "]" + on_stream(stream, nonblocking) + "}",
                        args, args_len);
  return static_cast<int>(field(reply.header, "error_code"));
}

// cudaFuncSetAttribute's dynamic shared memory opt-in for the kernel `name` (the kernel `function`
// tells which library's launches it applies to).
extern "C" __attribute__((visibility("default"))) int cuset_port_attribute(const void* function, const char* name,
                                                                           long value) {
  std::string library;
  uintptr_t offset = 0;
  if (!locate(function, library, offset)) return 98;  // cudaErrorInvalidDeviceFunction
  Reply reply = request("{\"op\": \"attribute\", \"library\": " + quoted(library) + ", \"name\": " + quoted(name) +
                        ", \"value\": " + std::to_string(value) + "}");
  return static_cast<int>(field(reply.header, "error_code"));
}

// cudaMemcpyToSymbol / cudaMemcpyFromSymbol: `symbol` is the host's copy of a __device__ or
// __constant__ variable; the device process writes or reads its own copy.
extern "C" __attribute__((visibility("default"))) int cuset_port_symbol(const void* symbol, void* host, size_t n,
                                                                        int to_device) {
  std::string library;
  uintptr_t offset = 0;
  if (!locate(symbol, library, offset)) return 13;  // cudaErrorInvalidSymbol
  // A device pointer as the source (cudaMemcpyToSymbol from a tensor's data_ptr, which a GPU's
  // unified addressing allows): the device process copies it from its own memory.
  bool from_device = to_device && cuset_arena_owns(host);
  std::string header = "{\"op\": \"symbol\", \"library\": " + quoted(library) + ", \"offset\": " +
                       std::to_string(offset) + ", \"n\": " + std::to_string(n) +
                       ", \"to_device\": " + (to_device ? "true" : "false") +
                       (from_device ? ", \"src\": " + std::to_string(reinterpret_cast<uintptr_t>(host)) : "") + "}";
  Reply reply = to_device && !from_device ? request(header, host, n) : request(header);
  if (!to_device && reply.payload.size() == n) std::memcpy(host, reply.payload.data(), n);
  return static_cast<int>(field(reply.header, "error_code"));
}

// A synchronisation, an event's record or a query (`action`, as streams.py names them) of `stream`
// (0: the legacy default stream) or `event`; cudaErrorNotReady (600) from a query of pending work.
extern "C" __attribute__((visibility("default"))) int cuset_port_stream(const char* action, unsigned long long stream,
                                                                        unsigned long long event) {
  Reply reply = request("{\"op\": \"stream\", \"action\": " + quoted(action) + ", \"stream\": " +
                        std::to_string(stream) + ", \"event\": " + std::to_string(event) + "}");
  return static_cast<int>(field(reply.header, "error_code"));
}

// cudaGetLastError / cudaPeekAtLastError: the device process keeps the launches' errors.
extern "C" __attribute__((visibility("default"))) int cuset_port_last_error(int take) {
  Reply reply = request(std::string("{\"op\": \"last_error\", \"take\": ") + (take ? "true" : "false") + "}");
  return static_cast<int>(field(reply.header, "error_code"));
}

// Lets torch run its CUDA device guards in a process without CUDA: the host side's device tensors
// say "cuda" (a GPU's answer to x.is_cuda and x.device) while their data stays behind the port.
extern "C" __attribute__((visibility("default"))) void cuset_register_fake_cuda_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::CUDA,
                                                       new c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>());
}

// The start of the library (or program) that holds `address`: the device process's anchor for
// the offsets the host sends.
extern "C" __attribute__((visibility("default"))) uintptr_t cuset_base_of(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0;
}
