"""The process's resident memory, and handing a mapped tensor's pages back to the system.

A packed model is a memory-mapped file: what a pass reads stays resident, whether or not it is read
again. A tensor that will not be read again (a lean target's int8 blocks) lets its pages go with
``madvise(MADV_DONTNEED)``; that is safe only where the pages are a file's, which the system reads
again from the file if anything touches them. Anonymous memory would come back as zeros, so a tensor
of the allocator's is left to the allocator.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import torch

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def resident_bytes() -> int | None:
    """The process's resident memory now (``VmRSS``), or None where ``/proc`` does not say."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * mmap.PAGESIZE
    except (OSError, IndexError, ValueError):
        return None


def file_mapped(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s bytes lie in a mapping of a file (such as a packed model's)."""
    address = tensor.data_ptr()
    return _file_mapped(address, address + tensor.numel() * tensor.element_size())


def _file_mapped(start: int, end: int) -> bool:
    """Whether the addresses ``start`` to ``end`` lie in one mapping of a file."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                low, high = (int(part, 16) for part in fields[0].split("-"))
                if low <= start and end <= high:
                    return len(fields) >= 6 and fields[4] != "0" and fields[5].startswith(os.sep)
    except OSError:
        pass
    return False


def release_pages(tensor: torch.Tensor) -> int:
    """Hand back the whole pages inside ``tensor``'s bytes, if a file maps them; the bytes handed back
    (0 for a tensor of anonymous memory, or one smaller than a page). The tensor still reads the same
    values: the system pages them in from the file again where something reads them."""
    address, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (address + size) // mmap.PAGESIZE * mmap.PAGESIZE
    if end <= start or not file_mapped(tensor):
        return 0
    if _libc.madvise(start, end - start, mmap.MADV_DONTNEED) != 0:
        raise OSError(ctypes.get_errno(), f"madvise could not release {end - start} bytes of a mapped tensor")
    return end - start
