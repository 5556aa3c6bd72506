// What the harness switches between the candidate's runs: which fiber schedule a trial runs
// under, and whether launches run their kernels (the kernels-off run). They live in this
// library, which the trusted side builds and the harness loads (RTLD_GLOBAL) before the
// candidate, and not in the environment or a file: candidate code that reads its environment,
// /proc or its files cannot tell a kernels-off run from a trial. cuda_cpu.h reads them through
// weak references, so an extension loaded without this library runs with kernels on under
// schedule 0.
#include <atomic>

namespace {
std::atomic<int> kernels_on{1};
std::atomic<int> schedule{0};
}  // namespace

extern "C" __attribute__((visibility("default"))) int cuset_kernels_on() { return kernels_on.load(); }
extern "C" __attribute__((visibility("default"))) void cuset_set_kernels_on(int on) { kernels_on.store(on); }
extern "C" __attribute__((visibility("default"))) int cuset_schedule() { return schedule.load(); }
extern "C" __attribute__((visibility("default"))) void cuset_set_schedule(int value) { schedule.store(value); }
