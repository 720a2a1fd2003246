"""Ordered read-ahead: compute f(item) for the next items in worker threads while the caller trains.

A lazily generated training set (data/faces.py: every row a pure function of its index) costs 5-8 ms
of numpy per batch of 512 (87K faces), more than the whole full-softmax step on a GPU: measured on an
H100 machine, 6.6 ms of waiting for each batch beside a 5.3 ms step, 0.5-0.7 ms with 4 threads
(benchmarks/out/train_step_class_selection_table2_paper_cuda*.md). numpy releases the GIL inside its
ufunc loops and matrix products, so a few threads generate batches k+1..k+w while batch k trains. Results come back
in the items' order and are the same values as
computing them inline (f is pure), so a run's numbers do not depend on the thread count.

    for x in read_ahead(rows.__getitem__, batches, workers=4): ...
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

T, R = TypeVar("T"), TypeVar("R")


def read_ahead(f: Callable[[T], R], items: Iterable[T], workers: int, depth: int | None = None) -> Iterator[R]:
    """f(item) for each item, in order, with up to `depth` (default 2 * workers) computed ahead by
    `workers` threads; workers = 0 computes each when it is asked for. An exception in f is raised
    at its item; closing the generator early cancels what is queued and waits for what is running."""
    if workers <= 0:
        yield from map(f, items)
        return
    depth = depth or 2 * workers
    it = iter(items)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xcbench-read-ahead")
    pending = deque()
    try:
        for item in it:
            pending.append(pool.submit(f, item))
            if len(pending) >= depth:
                break
        while pending:
            out = pending.popleft().result()
            nxt = next(it, _END)
            if nxt is not _END:
                pending.append(pool.submit(f, nxt))
            yield out
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_END = object()


def default_workers(device_type: str) -> int:
    """Read-ahead threads when none are asked for: none on the CPU (the run's threads already do the
    work, and a run there is given one core of two), up to 4 beside a GPU (leaving cores to the others)."""
    return 0 if device_type == "cpu" else max(1, min(4, (os.cpu_count() or 2) // 2))
