"""What a run leaves behind: its log lines, metrics.json, history.csv and config.resolved.yaml.

metrics.json (docs/design.md, Results) holds the test metrics at the selected epoch (`metrics`), the history's
rows after the first epoch (`first`), the last (`final`), the selected (`best`) and before training
(`initial`), every per-epoch value as a list indexed by epoch (`curves`, wall-clock timings left out: they
are in `final` and history.csv), wall time, peak memory, the head's report, and where and how the run
ran (`run_record`: device, seed, git commit, library versions).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import platform
import subprocess
import time

import numpy as np
import torch

from xcbench import __version__
from xcbench.config import ROOT
from xcbench.device import device_name
from xcbench.io import sha256_of

LOG = logging.getLogger("xcbench.train")
WALL_CLOCK = ("epoch_time_s", "step_ms", "select_ms")  # per-epoch timings: in history.csv and `final`, not in `curves`
PROGRESS_S = 300.0  # inside an epoch, a log line this often where no progress bar shows (a log file, a DAG job)


def format_values(values: dict) -> str:
    """`k=v` pairs for a log line, numbers to 4 significant digits."""
    return " ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in values.items())


def log_epoch(label: str, rec: dict, epochs: int, s_per_epoch: float | None) -> None:
    """One line per epoch through `logging` (it reaches a DAG job's log, where tqdm is silent); with
    `s_per_epoch` None, an epoch recorded before a resume, said so instead of an ETA."""
    vals = format_values({k: v for k, v in rec.items() if k.startswith("val_") and isinstance(v, (int, float))})
    eta = None if s_per_epoch is None else (epochs - rec["epoch"]) * s_per_epoch
    LOG.info("%s epoch %d/%d loss=%.4g %s %.1f s/epoch %s", label, rec["epoch"], epochs, rec["train_loss"], vals,
             rec["epoch_time_s"], "(from the checkpoint)" if eta is None else f"ETA {int(eta // 60)}m{int(eta % 60):02d}s")


def progress(label: str, epoch: int, nb: int, first: int, every_s: float | None = None):
    """`tick(step)` for the batches of one epoch: every `every_s` seconds (PROGRESS_S) a log line with the
    batch reached, the rate and the epoch's ETA (a paper-scale epoch on a CPU runs for hours, and tqdm is
    silent where the output is not a terminal)."""
    every_s = PROGRESS_S if every_s is None else every_s
    t0 = last = time.perf_counter()

    def tick(step: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last < every_s or step <= first:
            return
        last, rate = now, (now - t0) / (step - first)
        eta = (nb - step) * rate
        LOG.info("%s epoch %d: batch %d/%d (%.0f%%), %.3g s/batch, epoch ETA %dm%02ds", label, epoch, step, nb,
                 100 * step / nb, rate, eta // 60, eta % 60)
    return tick


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def history_csv(history: list[dict]) -> str:
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for h in history for k in h))
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows(history)
    return buf.getvalue()


def input_digests(**paths: str | None) -> dict[str, str]:
    """{name: the first 16 hex digits of the file's sha256} of a run's input files (its prepared dataset, its
    cached features), None paths left out. A run's numbers depend on these files' bits, which its settings do not
    pin down: numpy's BLAS sums the features' SVD in another order on another thread count or CPU, changing
    their last bits and so every draw after them (benchmarks/reproduce_kept.py says so instead of "differs")."""
    return {k: sha256_of(v)[:16] for k, v in paths.items() if v}


def run_record(run, device: torch.device, inputs: dict | None = None) -> dict:
    """What every result folder's metrics.json says about where and how a run (run.Run) ran, and from which
    input files (`inputs`: input_digests)."""
    return {"device": str(device), "device_name": device_name(device), "seed": run.seed, "dataset": run.dataset,
            "method": run.method, "scale": run.exp["scale"], "git_commit": git_commit(), **({"inputs": inputs} if inputs else {}),
            "versions": {"xcbench": __version__, "torch": torch.__version__, "numpy": np.__version__,
                         "python": platform.python_version(), "cpu_capability": cpu_capability(),
                         "glibc_tunables": os.environ.get("GLIBC_TUNABLES", "")}}


def cpu_capability() -> str:
    """The vector instruction set of torch's CPU kernels here ('AVX2', 'AVX512', ...): the same seed gives the
    same bits on the CPU only under the same one (log_softmax's and exp's vector loops round differently). On a
    newer CPU, ATEN_CPU_CAPABILITY=avx2 sets it, and ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN's kernels (nn.LSTM's)
    to match (benchmarks/reproduce_kept.py)."""
    return torch.backends.cpu.get_cpu_capability()


def resolved_config(run, task) -> dict:
    """The settings one run trains with (its config.resolved.yaml): its run spec, the whole train config
    as given, the data it saw and the experiment it came from."""
    return {**run.spec, "train": run.train if task.trains else {}, "data": task.info, "experiment": run.exp}


def run_metrics(res: dict, n_classes: int, record: dict) -> dict:
    """metrics.json of a finished `fit` (its result `res`), with the run's `record`."""
    hist = res["history"]
    curves = {k: [h.get(k) for h in hist] for k in dict.fromkeys(k for h in hist for k in h) if k not in WALL_CLOCK}
    strip = lambda h: {k: v for k, v in h.items() if k not in ("epoch", "epoch_time_s", "lr")}  # noqa: E731
    best = [h for h in hist if h["epoch"] == res["best_epoch"]]
    return {"metrics": res["test"], "train_metrics": res["train"], "final": strip(hist[-1]) if hist else {},
            "initial": strip(hist[0]) if hist and hist[0]["epoch"] == 0 else {},
            "first": next((strip(h) for h in hist if h["epoch"] == 1), {}),  # after one epoch (per-epoch head metrics)
            "best": strip(best[0]) if best else {}, "best_epoch": res["best_epoch"],
            "curves": curves, "epochs": sum(h["epoch"] > 0 for h in hist),
            "wall_time_s": res["wall_time_s"], "time_per_epoch_s": res["time_per_epoch_s"],
            "memory": res["memory"], "head": res["head"], "n_classes": n_classes,
            **({"cut_short_after_epoch": res["cut_short_after_epoch"]} if res["cut_short_after_epoch"] else {}),
            "log_n_classes": math.log(n_classes), **record}
