// What the harness switches between the candidate's runs: which fiber schedule a trial runs
// under, and whether launches run their kernels (the kernels-off run). They live in this
// library, which the trusted side builds and the harness loads (RTLD_GLOBAL) before the
// candidate, and not in the environment or a file: candidate code that reads its environment,
// /proc or its files cannot tell a kernels-off run from a trial. cuda_cpu.h reads them through
// weak references, so an extension loaded without this library runs with kernels on under
// schedule 0.
// It also holds what tier 1's ptxas report says of each kernel (registers per thread, static
// shared memory), which the harness sets before any launch: cuda_cpu.h checks launches against it.
#include <atomic>
#include <map>
#include <mutex>
#include <string>

namespace {
std::atomic<int> kernels_on{1};
std::atomic<int> schedule{0};
struct Resources {
  int registers = 0;
  long shared_bytes = 0;
};
std::mutex resources_lock;
std::map<std::string, Resources>& resources() {
  static auto* table = new std::map<std::string, Resources>();
  return *table;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int cuset_kernels_on() { return kernels_on.load(); }
extern "C" __attribute__((visibility("default"))) void cuset_set_kernels_on(int on) { kernels_on.store(on); }
extern "C" __attribute__((visibility("default"))) int cuset_schedule() { return schedule.load(); }
extern "C" __attribute__((visibility("default"))) void cuset_set_schedule(int value) { schedule.store(value); }

// Tier 1's figures for the kernel called `name` (all instantiations of a template share the name:
// the largest figures count).
extern "C" __attribute__((visibility("default"))) void cuset_set_kernel_resources(const char* name, int registers,
                                                                                  long shared_bytes) {
  std::lock_guard<std::mutex> hold(resources_lock);
  Resources& entry = resources()[name];
  if (registers > entry.registers) entry.registers = registers;
  if (shared_bytes > entry.shared_bytes) entry.shared_bytes = shared_bytes;
}
// Whether tier 1 reported the kernel called `name`, and its figures.
extern "C" __attribute__((visibility("default"))) int cuset_kernel_resources(const char* name, int* registers,
                                                                             long* shared_bytes) {
  std::lock_guard<std::mutex> hold(resources_lock);
  auto found = resources().find(name);
  if (found == resources().end()) return 0;
  *registers = found->second.registers;
  *shared_bytes = found->second.shared_bytes;
  return 1;
}
