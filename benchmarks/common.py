"""Shared by the benchmark scripts: the median wall time of a call after warm-up calls, and the one writer of
a benchmark's outputs (`<name>.json` and `<name>.md` in its output folder, each written to a temporary file
and renamed, so an interrupted benchmark never leaves half a table). A run is built as `xcbench train`
builds it by the package itself: run.make_run, tasks.base.task_of, train.model_of."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


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


def write_outputs(name: str, data, markdown: str, out_dir: str | Path = OUT) -> list[Path]:
    """`<out_dir>/<name>.json` (the measured rows, with whatever metadata the script keeps) and `<name>.md`
    (its table), atomically; returns both paths."""
    from xcbench.io import write_json, write_text

    out_dir = Path(out_dir)
    paths = [out_dir / f"{name}.json", out_dir / f"{name}.md"]
    write_json(paths[0], data)
    write_text(paths[1], markdown if markdown.endswith("\n") else markdown + "\n")
    return paths
