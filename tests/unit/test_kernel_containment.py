"""What keeps a kernel in the device process to a GPU kernel's reach (cpu/device/containment.py):
which argument words are host addresses, how the refusal names them, and what the kernel thread's
filter allows. The attacks themselves run in tests/security/test_inputs_and_sizes.py."""

from __future__ import annotations

import struct

from cuset_core.verify.cpu.device.containment import (
    KERNEL_SYSCALLS,
    ON_OUTPUT_FDS,
    host_mappings,
    host_words,
    illegal_address,
    kernel_filter,
)

MAPS = """\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0040000000 rw-p 00000000 00:00 0
7f1000000000-7f1000200000 r-xp 00000000 08:01 42                         /usr/lib/x86_64-linux-gnu/libc.so.6
7f2000000000-7f2000010000 r-xp 00000000 00:01 7                          /memfd:candidate.so (deleted)
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
"""
DEVICE_RANGE = (0x7F0000000000, 0x7F0040000000)
LIBRARY = (0x7F2000000000, 0x7F2000010000)


HOST = host_mappings(MAPS, [DEVICE_RANGE, LIBRARY])


def words(*values: int) -> bytes:
    return struct.pack(f"{len(values)}Q", *values)


def test_code_libraries_heap_and_stacks_are_host_memory():
    assert HOST.find(0x7F1000000100) == "libc.so.6"
    assert HOST.find(0x55D0C0000010) == "[heap]"
    assert HOST.find(0x7FFC00000008) == "[stack]"


def test_device_memory_the_candidate_library_and_plain_numbers_are_not():
    assert HOST.find(0x7F0000001000) is None  # the device range
    assert HOST.find(0x7F2000000040) is None  # a __device__ symbol
    for number in (0, 1024, 1 << 40, 0x3FF0000000000000, 0xFFFFFFFFFFFFFFFF):  # ints, 1.0, -1
        assert HOST.find(number) is None
    assert HOST.find(0x7F1000200000) is None  # just past libc's mapping


def test_a_mapping_the_kernel_merged_with_the_device_range_is_host_memory_only_outside_it():
    # The device range's first block (rw) right after the host's anonymous memory: one line of maps.
    merged = host_mappings("7effff000000-7f0000100000 rw-p 00000000 00:00 0\n", [DEVICE_RANGE])
    assert merged.find(0x7EFFFF000010) == "anonymous memory"
    assert merged.find(0x7F0000000000) is None and merged.find(0x7F00000FFFF8) is None


def test_every_aligned_word_of_the_arguments_is_read_structs_included():
    # (float* x, int n) then a struct by value holding a libc pointer at its second word.
    arguments = words(0x7F0000001000, 4096, 7, 0x7F1000000100) + b"\0\0\0"
    assert host_words(arguments, HOST) == [(24, 0x7F1000000100, "libc.so.6")]


def test_the_refusal_names_cudas_error_the_kernel_and_the_first_argument_in_order():
    # Arguments 1-3 start at 16, 8 and 0 (libstdc++ lays a tuple out last first); 2 and 3 hold host addresses.
    found = host_words(words(0x7FFC00000010, 0x7F1000000100, 0x7F0000001000), HOST)
    reason = illegal_address("leak", found, [16, 8, 0])
    assert "cudaErrorIllegalAddress" in reason
    assert "kernel leak's argument 2 holds 0x7f1000000100" in reason and "libc.so.6" in reason


def test_without_the_launch_sites_offsets_the_refusal_names_the_bytes():
    reason = illegal_address("leak", [(8, 0x7F1000000100, "libc.so.6")], [])
    assert "bytes 8-15 of its arguments" in reason


def test_the_kernel_filter_is_a_program_of_the_allowed_calls():
    program = kernel_filter()
    assert program and len(program) % 8 == 0  # struct sock_filter: 8 bytes each
    assert ON_OUTPUT_FDS <= KERNEL_SYSCALLS.keys()
    assert not {"open", "openat", "socket", "connect", "execve", "ptrace", "process_vm_writev"} & KERNEL_SYSCALLS.keys()
