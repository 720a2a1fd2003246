"""numpy's BLAS (OpenBLAS) settings of a job, fixed in the environment before numpy loads, since OpenBLAS reads
them once, when numpy's library is loaded.

A product's or factorisation's last bits depend on how OpenBLAS splits and orders its sums:

- its thread count: the tf-idf + SVD features of synthetic-xmc-10k differ between one thread and two or more
  (docs/reproducing.md);
- its kernels, chosen for the CPU at load time: Haswell's (AVX2) and SkylakeX's (AVX512) give other features,
  and OpenBLAS picks SkylakeX on an AVX512 Intel CPU but Haswell on an AMD EPYC with AVX512 (this machine).

So jobs whose numpy work feeds a run (prepare, features, and a train job's lazily drawn faces) use OpenBLAS's
Haswell kernels on every x86-64 CPU, as the quick tree's torch kernels are capped at AVX2: a user's CPU then
builds the same inputs as the reference tree's. OPENBLAS_CORETYPE or OPENBLAS_NUM_THREADS set in the
environment win; other architectures keep OpenBLAS's own choice (their kernels differ anyway).
"""

from __future__ import annotations

import os
import platform

X86 = ("x86_64", "amd64")
CORETYPE = "Haswell"   # OpenBLAS's AVX2 + FMA kernels, present on every x86-64 CPU since 2013


def pin_numpy_blas(threads: int | str | None = None) -> None:
    """Set OpenBLAS's thread count to `threads` (None: leave it) and, on x86-64, its kernels unless the environment
    names them. Effective only before numpy loads; a job forked from a warm server (forkserver.py) keeps what the
    server set here before it loaded numpy."""
    if threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    if platform.machine().lower() in X86:
        os.environ.setdefault("OPENBLAS_CORETYPE", CORETYPE)
