"""The C allocator's settings for a broker process (glibc's malloc; elsewhere nothing).

A broker allocates and frees buffers of about a request's or a record slice's size for
every produce request and for every fetch over TLS (the slice read with pread, then the
TLS layer's output of it), ~1 MB each with Kafka's default sizes. glibc serves these
from the top of the heap and gives the top back to the kernel once more than
M_TRIM_THRESHOLD is free there; by default that threshold follows twice the largest
mmap'ed chunk freed so far, so whether a fetch's buffers trim the heap depended on which
buffers happened to be freed first. When they did, every slice cost a brk down and up
and a page fault per 4 KiB touched again: ~630 brk calls and +0.7 s of broker CPU per
10^6 1 KiB messages consumed over SASL_SSL (broker bench, strace -c). Fixed thresholds,
within the range glibc's own adjustment could reach, make it independent of history.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
# Chunks below this come from the heap (glibc adjusts it up to 32 MiB by itself).
MMAP_THRESHOLD_BYTES = 8 << 20
# Free heap top kept for the next allocations before it goes back to the kernel.
TRIM_THRESHOLD_BYTES = 64 << 20


def tune_malloc() -> bool:
    """Set the thresholds above; False when the C library is not glibc (nothing done)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (and these mallopt codes)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
