"""Process settings of a compute job (`xcbench train`, `features`): torch's thread count and glibc's
allocator thresholds. Called by the CLI verbs only, never on import (importing xcbench changes no
global state).

Allocator: glibc serves every block above M_MMAP_THRESHOLD (128 KiB, rising adaptively to 32 MiB)
with a fresh mmap and returns it with munmap, and trims the heap top above M_TRIM_THRESHOLD. A
training step allocates and frees tensors of 10-400 MB (PTB: (256 * 35, 10^4) logits), so each step
page-faults its whole working set again: measured on the 2-core CPU (PTB LSTM, Uniform, batch 256,
one thread) 10.7 s system against 13.8 s user time, 557 ms per step. With the thresholds raised
(blocks come from the heap, freed memory is kept for reuse): 1.0 s system, 440 ms per step, and
evaluation 8.2 s instead of 16.0 s. Peak memory is unchanged (the same blocks are reused).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import torch

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc malloc.h
MMAP_THRESHOLD = 1 << 30   # blocks above this still get their own mapping
TRIM_THRESHOLD = 2**31 - 1
TOP_PAD = 1 << 28


def tune_malloc() -> bool:
    """Keep freed blocks for reuse instead of returning them to the kernel; False where the C
    library is not glibc (nothing changes then)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) and mallopt(M_TOP_PAD, TOP_PAD)
    return bool(ok and (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or mallopt(M_MMAP_THRESHOLD, 32 << 20)))


def configure_process(threads: int | None) -> None:
    """torch's intra-op threads (`threads`: the Snakemake rule's `threads:`; None leaves torch's default)
    and the allocator."""
    if threads:
        torch.set_num_threads(int(threads))
    tune_malloc()
