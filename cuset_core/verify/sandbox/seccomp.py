"""The sandbox's seccomp filter: the system calls a sandboxed command may not make, as the BPF
program bwrap loads for it (built with libseccomp, via ``pyseccomp``)."""

from __future__ import annotations

import errno
import functools
import tempfile
from typing import Any

_BLOCKED_SYSCALLS = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
    "keyctl", "add_key", "request_key", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "perf_event_open", "kexec_load", "init_module", "finit_module", "delete_module", "socket",
    "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot",
)  # fmt: skip
_NAMESPACE_FLAGS = {  # clone flags that create a namespace (linux/sched.h)
    "CLONE_NEWTIME": 0x00000080, "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000,
}  # fmt: skip


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes:
    """The seccomp BPF program (libseccomp, via pyseccomp) that bwrap loads for the command:
    allow everything but the calls that could escape or attack the sandbox (see the package's doc)."""
    import pyseccomp as seccomp

    deny = seccomp.ERRNO(errno.EPERM)
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in _BLOCKED_SYSCALLS:
        program.add_rule(deny, name)
    for flag in _NAMESPACE_FLAGS.values():
        program.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory that seccomp cannot read; ENOSYS makes libc use clone.
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return exported_bpf(program)


def exported_bpf(program: Any) -> bytes:
    """A pyseccomp ``SyscallFilter`` as the BPF program the kernel loads (``struct sock_filter``s)."""
    with tempfile.TemporaryFile() as exported:
        program.export_bpf(exported)
        exported.seek(0)
        return exported.read()
