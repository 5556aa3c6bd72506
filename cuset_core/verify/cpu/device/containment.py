"""What keeps a kernel to what a GPU kernel can do, though it runs as native code in the device process.

The device process runs the candidate's kernels in its own address space (:mod:`.server`), beside
the inputs, the Python interpreter and libc. Two layers of the device process keep a kernel from
reaching them as a GPU kernel could not (docs/verification.md, "Kernels inside the device process"):

- a GPU rule, :func:`host_words`: a kernel argument that holds a host address faults. At each
  launch every 8-byte-aligned word of the bound arguments (structs passed by value included) is
  looked up among the device process's mappings that are not device memory (code, libraries, the
  Python heap, stacks: :class:`HostMappings`, read once per run after the candidate's libraries
  are loaded); a word inside one refuses the launch before it runs, as ``cudaErrorIllegalAddress``.
  Device memory (the device range: ``cudaMalloc``, torch's device tensors), the candidate
  libraries' own mappings (``__constant__`` and ``__device__`` symbols) and plain numbers pass.
- a containment, :func:`kernel_filter`: kernels run on a thread of their own
  (``runtime/kernel_thread.cpp``) under a seccomp filter bound to that thread alone, which allows
  only the system calls kernel execution needs (:data:`KERNEL_SYSCALLS`). Any other (``open``,
  ``write`` to a file, ``socket``, ``execve``, ``ptrace``, ...) ends the device process with the
  runtime's line: ``runtime_error``. A kernel that finds libc without the host's help still cannot
  reach outside.

Neither stops a kernel that reads or writes the device process's memory, or calls code that needs
no system call (the Python C API): kernels in a process of their own that maps only device memory
would.
"""

from __future__ import annotations

import bisect
import functools
import os
from dataclasses import dataclass

# The device process's stdout and stderr: the judge's log, which the candidate's host never reads.
OUTPUT_FDS = (1, 2)
# The system calls the kernel thread may make, and who makes them. Any other faults.
KERNEL_SYSCALLS: dict[str, str] = {
    "brk": "malloc (the runtime's tables, device-side malloc)",
    "mmap": "malloc, the fibers' stacks",
    "munmap": "free, the fibers' stacks",
    "mremap": "realloc",
    "mprotect": "the fibers' guard pages, malloc's arenas",
    "madvise": "free",
    "futex": "locks, the hand-over between the server and the kernel thread",
    "sched_yield": "spinning locks",
    "rt_sigprocmask": "swapcontext, where fibers switch without the runtime's assembly",
    "rt_sigreturn": "returning from a signal handler",
    "clock_gettime": "clock(), device-side clock64() and the like",
    "gettimeofday": "clocks",
    "getrandom": "malloc's first use on a thread",
    "exit": "the kernel thread's end",
    "exit_group": "the runtime's fault handlers (_exit)",
    "write": "device-side printf, the runtime's fault lines (on OUTPUT_FDS only)",
    "writev": "libc's abort message (on OUTPUT_FDS only)",
    "fstat": "stdio's first printf (on OUTPUT_FDS only)",
    "newfstatat": "stdio's first printf, as glibc's fstat (on OUTPUT_FDS only)",
}
# Of those, the calls allowed on OUTPUT_FDS alone (their first argument is the file descriptor).
ON_OUTPUT_FDS = frozenset({"write", "writev", "fstat", "newfstatat"})


@functools.lru_cache(maxsize=1)
def kernel_filter() -> bytes:
    """The kernel thread's seccomp program (BPF, built with libseccomp as the sandbox's is):
    :data:`KERNEL_SYSCALLS` allowed, anything else a SIGSYS the runtime turns into its fault line."""
    import pyseccomp as seccomp

    from cuset_core.verify.sandbox import exported_bpf

    program = seccomp.SyscallFilter(seccomp.TRAP)
    for name in KERNEL_SYSCALLS:
        if name in ON_OUTPUT_FDS:
            for fd in OUTPUT_FDS:
                program.add_rule(seccomp.ALLOW, name, seccomp.Arg(0, seccomp.EQ, fd))
        else:
            program.add_rule(seccomp.ALLOW, name)
    return exported_bpf(program)


@dataclass(frozen=True)
class HostMappings:
    """The device process's mappings that are not device memory, sorted by start."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    names: tuple[str, ...]

    def find(self, address: int) -> str | None:
        """What holds ``address`` ("libc.so.6", "[stack]", "anonymous memory"), None when none does."""
        at = bisect.bisect_right(self.starts, address) - 1
        if at < 0 or address >= self.ends[at]:
            return None
        return self.names[at] or "anonymous memory"


def host_mappings(maps: str, device: list[tuple[int, int]]) -> HostMappings:
    """The parts of the mappings of ``maps`` (``/proc/<pid>/maps`` text) outside every ``device``
    range ([start, end) byte addresses). A mapping is cut rather than judged whole: the kernel merges
    adjacent anonymous mappings, so one line of ``maps`` may hold the device range's first block and
    the host's memory just below it."""
    rows: list[tuple[int, int, str]] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        name = os.path.basename(fields[5]) if len(fields) > 5 else ""
        rows.extend((low, high, name) for low, high in _outside(start, end, device))
    rows.sort()
    return HostMappings(tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows))


def _outside(start: int, end: int, device: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces of [start, end) that no ``device`` range covers."""
    pieces = [(start, end)]
    for low, high in device:
        pieces = [piece for a, b in pieces for piece in ((a, min(b, low)), (max(a, high), b)) if piece[0] < piece[1]]
    return pieces


def host_words(arguments: bytes, mappings: HostMappings) -> list[tuple[int, int, str]]:
    """Each 8-byte-aligned word of a launch's bound arguments that is a host address: (its byte
    offset, the address, the mapping that holds it)."""
    words = memoryview(arguments)[: len(arguments) // 8 * 8].cast("Q")
    found = []
    for index, word in enumerate(words):
        where = mappings.find(word)
        if where is not None:
            found.append((8 * index, word, where))
    return found


def illegal_address(kernel: str, found: list[tuple[int, int, str]], arguments: list[int]) -> str:
    """The runtime error of a launch whose arguments hold host addresses (``host_words``), naming the
    first such argument by where each starts (``arguments``: the launch site's offsets, in order)."""
    named = [(_argument(offset, arguments), offset, address, where) for offset, address, where in found]
    number, offset, address, where = min(named, key=lambda row: (row[0] or len(arguments) + 1, row[1]))
    which = f"argument {number}" if number else f"bytes {offset}-{offset + 7} of its arguments"
    return (
        f"an illegal memory access (cudaErrorIllegalAddress): kernel {kernel}'s {which} holds {address:#x}, a host"
        f" address (in {where}), which a GPU kernel cannot dereference; device memory comes from cudaMalloc,"
        " device tensors or device symbols"
    )


def _argument(offset: int, arguments: list[int]) -> int:
    """The number (from 1) of the argument that starts last at or before ``offset``; 0 when none."""
    starts = [(start, number) for number, start in enumerate(arguments, 1) if start <= offset]
    return max(starts)[1] if starts else 0
