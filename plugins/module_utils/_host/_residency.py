"""PRIVATE to llmops.sglang. Page-cache residency of a file, measured with mincore(2).

The file range is mapped read-only through libc's own mmap (ctypes, no external tool) and
mincore() reports, page by page, which pages of the file are in the page cache. mincore never
faults a page in, so measuring changes nothing, and a file truncated under the mapping cannot
raise SIGBUS because no page is touched. Ranges are measured in windows of WINDOW bytes so a
file of hundreds of GB needs neither one huge mapping nor one huge vector.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from typing import Optional

PAGE_SIZE = mmap.PAGESIZE
WINDOW = 1 << 30  # bytes mapped and measured at a time (a 256 KiB vector with 4 KiB pages)

_PROT_READ = 0x1
_MAP_SHARED = 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value
# Only bit 0 of each mincore byte is defined (resident); the others are reserved.
_LOW_BIT = bytes(b & 1 for b in range(256))
_LIBC: Optional[ctypes.CDLL] = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        # The running interpreter already links libc: no ctypes.util.find_library (it runs ldconfig).
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_int64]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.restype = ctypes.c_int
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        _LIBC = libc
    return _LIBC


def _raise_errno(call: str, path: Optional[str]) -> None:
    err = ctypes.get_errno()
    raise OSError(err, "%s: %s" % (call, os.strerror(err)), path)


def _window_resident(fd: int, offset: int, length: int, path: Optional[str]) -> int:
    """Resident bytes of [offset, offset+length) where offset is page aligned."""
    libc = _libc()
    addr = libc.mmap(None, length, _PROT_READ, _MAP_SHARED, fd, offset)
    if addr is None or addr == _MAP_FAILED:
        _raise_errno("mmap", path)
    try:
        pages = (length + PAGE_SIZE - 1) // PAGE_SIZE
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(addr, length, vec) != 0:
            _raise_errno("mincore", path)
    finally:
        libc.munmap(addr, length)
    flags = bytes(vec).translate(_LOW_BIT)
    resident = flags.count(1) * PAGE_SIZE
    tail = length % PAGE_SIZE
    if tail and flags[-1]:
        resident -= PAGE_SIZE - tail  # the last page is only partly file data
    return resident


def resident_bytes(fd: int, size: int, offset: int = 0, length: Optional[int] = None,
                   path: Optional[str] = None) -> int:
    """Bytes of the file range [offset, offset+length) (default: the whole file of `size` bytes)
    that are in the page cache now. Counts whole pages, the file's partial last page by its
    data bytes. `path` only names the file in an OSError."""
    end = size if length is None else min(size, offset + length)
    start = offset - offset % PAGE_SIZE  # mmap offsets must be page aligned
    total = 0
    while start < end:
        span = min(WINDOW, end - start)
        total += _window_resident(fd, start, span, path)
        start += span
    # The alignment may have counted bytes before `offset`; never report more than asked.
    return min(total, max(0, end - offset))
