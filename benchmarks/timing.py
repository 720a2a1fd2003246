"""Shared by the benchmark scripts: the median wall time of a call after warm-up calls."""

from __future__ import annotations

import statistics
import time


def timed(fn, repeats: int, sync, warmup: int = 3) -> float:
    """Median seconds of `repeats` calls of fn() after `warmup` calls; `sync()` waits for the device
    (torch.cuda.synchronize on a GPU, a no-op on the CPU) before each clock read."""
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)
