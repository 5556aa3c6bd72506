// The device process's kernel thread (tier 2's device boundary, cpu/device/): every kernel runs on
// this one thread, under a seccomp filter installed on it alone (no TSYNC), so the device process's
// server, on its own thread, keeps its system calls and a kernel gets only those kernel execution
// needs (cpu/device/containment.py holds the table and builds the filter). A GPU kernel cannot open
// a file, write one or reach a socket; native code in this process could, through a libc address it
// was handed or found. A system call outside the table raises SIGSYS on this thread, and the
// handler ends the device process with the runtime's line, as a kernel's segmentation fault does.
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

// A launch site's remote_entry in a candidate library (cuda_cpu.h).
using Entry = void (*)(const void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, size_t, const char*);

struct Launch {
  Entry entry;
  const void* arguments;
  unsigned dims[6];
  size_t smem;
  const char* name;
};

struct KernelThread {
  std::mutex lock;
  std::condition_variable changed;
  std::vector<sock_filter> filter;
  bool started = false;
  bool ready = false;
  int error = 0;                    // errno of a filter that could not be installed
  const Launch* pending = nullptr;  // posted by the server; cleared by the kernel thread once run
};

KernelThread& kernel_thread() {
  static auto* state = new KernelThread();  // never freed: the thread outlives static destructors
  return *state;
}

void on_system_call(int, siginfo_t* info, void*) {
  char text[256];
  int n = std::snprintf(text, sizeof text,
                        "cuset runtime: a kernel made system call %d, which a GPU kernel cannot make (kernels here "
                        "may not open or write files, reach sockets or start processes)\n",
                        info ? info->si_syscall : -1);
  ssize_t ignored = write(2, text, n > 0 ? static_cast<size_t>(n) : 0);
  (void)ignored;
  _exit(87);
}

void* serve(void*) {
  KernelThread& k = kernel_thread();
  // The runtime's fault handler runs on an alternate stack (a fiber's overflow leaves none); each
  // thread has its own, and sigaltstack is not a call the filter allows.
  static char alternate_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alternate_stack;
  ss.ss_size = sizeof alternate_stack;
  sigaltstack(&ss, nullptr);
  sock_fprog program{static_cast<unsigned short>(k.filter.size()), k.filter.data()};
  int error = 0;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) != 0)
    error = errno;
  {
    std::lock_guard<std::mutex> hold(k.lock);
    k.error = error;
    k.ready = true;
  }
  k.changed.notify_all();
  if (error) return nullptr;
  std::unique_lock<std::mutex> hold(k.lock);
  for (;;) {
    k.changed.wait(hold, [&] { return k.pending != nullptr; });
    const Launch* launch = k.pending;
    hold.unlock();
    launch->entry(launch->arguments, launch->dims[0], launch->dims[1], launch->dims[2], launch->dims[3],
                  launch->dims[4], launch->dims[5], launch->smem, launch->name);
    hold.lock();
    k.pending = nullptr;
    k.changed.notify_all();
  }
}

}  // namespace

// Starts the kernel thread under `filter` (a seccomp BPF program of `bytes` bytes), once per
// process; returns 0, or the errno of a thread or filter that could not be set up (then no kernel
// may run: cuset_kernel_thread_run refuses).
extern "C" __attribute__((visibility("default"))) int cuset_kernel_thread_start(const void* filter, size_t bytes) {
  KernelThread& k = kernel_thread();
  std::unique_lock<std::mutex> hold(k.lock);
  if (k.started) return k.error;
  k.started = true;
  const auto* first = static_cast<const sock_filter*>(filter);
  k.filter.assign(first, first + bytes / sizeof(sock_filter));
  if (k.filter.empty()) return k.error = EINVAL;
  struct sigaction action {};
  action.sa_sigaction = &on_system_call;
  action.sa_flags = SA_ONSTACK | SA_SIGINFO;
  sigaction(SIGSYS, &action, nullptr);
  pthread_t thread;
  if (int failed = pthread_create(&thread, nullptr, &serve, nullptr)) return k.error = failed;
  pthread_detach(thread);
  k.changed.wait(hold, [&] { return k.ready; });
  return k.error;
}

// Runs the launch site's `entry` on the kernel thread and waits for it to return; 0, or the errno
// of a kernel thread that is not running (nothing ran).
extern "C" __attribute__((visibility("default"))) int cuset_kernel_thread_run(void* entry, const void* arguments,
                                                                                unsigned gx, unsigned gy, unsigned gz,
                                                                                unsigned bx, unsigned by, unsigned bz,
                                                                                size_t smem, const char* name) {
  KernelThread& k = kernel_thread();
  Launch launch{reinterpret_cast<Entry>(entry), arguments, {gx, gy, gz, bx, by, bz}, smem, name};
  std::unique_lock<std::mutex> hold(k.lock);
  if (!k.ready || k.error) return k.error ? k.error : ESRCH;
  k.pending = &launch;
  k.changed.notify_all();
  k.changed.wait(hold, [&] { return k.pending == nullptr; });
  return 0;
}
