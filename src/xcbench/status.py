"""Where a campaign's runs stand, read from their checkpoints alone (`python -m xcbench status`).

A run folder results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>/ holding `checkpoint.pt` is in
progress (no metrics.json) or was cut short by `--finish` (metrics.json beside the checkpoint). For each,
from the checkpoint (read memory-mapped: a 357 MB one opens in milliseconds, its tensors never read):

    progress  e + s/nb of E epochs: the finished epochs e (`epoch`), the batches s of the next one done at a
              checkpoint inside the epoch (`step`; nb is not stored, so the batches are shown, not a fraction)
    left      (E - e) x elapsed / e - t_in: the finished epochs' mean time for each epoch still owed, less the
              time already spent in the next one (t_in, the checkpoint's `partial`); unknown before one epoch
    age       now - the file's modification time: how long ago the run last saved (a running job saves at
              least every epoch, or every `--checkpoint-minutes` inside one)
    stop rule b of P: the epochs since validation last gained against the patience that stops the run: a plateau
              schedule's `stop_patience` (its `bad`) or early stopping's `select.patience` (selection.BestEpoch's
              `bad`), the nearer of the two where both apply; the run stops after P - b more epochs without a
              gain, so `left`, which counts every epoch to E, is then at most what it still owes

its last validation numbers, and the pid of the `python -m xcbench train` process training it on this machine
(from /proc: the process to send SIGUSR1 for a checkpoint now, checkpoint.Signals; not the shell Snakemake wraps
it in). The times are the run's own wall clock where it trained, so `left` carries
that machine's load (docs/results.md: runs beside another training).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from xcbench.checkpoint import CHECKPOINT
from xcbench.schedules import plateau_settings


def training_pids(proc: Path = Path("/proc")) -> dict[Path, int]:
    """{resolved --out folder: pid} of the `python -m xcbench train` processes here; {} without a /proc."""
    out = {}
    for d in proc.glob("[0-9]*"):
        try:
            argv = [a.decode() for a in (d / "cmdline").read_bytes().split(b"\0") if a]
            i = argv.index("-m")
            if argv[i + 1:i + 3] != ["xcbench", "train"] or not Path(argv[0]).name.startswith("python"):
                continue  # another program, or a shell whose one argument holds the command
            folder = Path(argv[argv.index("--out") + 1])
            out[(Path(os.readlink(d / "cwd")) / folder).resolve()] = int(d.name)  # an absolute --out wins the join
        except (OSError, ValueError, IndexError):  # gone meanwhile, not ours to read, or no -m / --out
            continue
    return out


def stop_rule(ck: dict, train: dict) -> tuple[int, int] | None:
    """(b, P) of the rule nearest to stopping the run: b epochs without a gain of the P that stop it (module
    docstring); None when no rule stops it before its last epoch."""
    rules = []
    plateau = plateau_settings(train)
    if plateau and ck.get("schedule"):
        rules.append((int(ck["schedule"]["bad"]), int(plateau["stop_patience"])))
    patience = (train.get("select") or {}).get("patience")
    if patience is not None and ck.get("select"):
        rules.append((int(ck["select"]["bad"]), int(patience)))
    owed = int(train["epochs"]) - int(ck["epoch"]) if train.get("epochs") is not None else None
    rules = [r for r in rules if owed is None or r[1] - r[0] < owed]   # one that cannot fire before E stops nothing
    return min(rules, key=lambda r: r[1] - r[0], default=None)


def run_status(ckpt: Path, root: Path, now: float | None = None, pids: dict[Path, int] | None = None) -> dict:
    """One row of the status table for the checkpoint at `ckpt`, named relative to `root` (module docstring)."""
    ck = torch.load(ckpt, weights_only=True, mmap=True, map_location="cpu")
    folder = ckpt.parent
    spec = ck.get("spec") or {}
    epochs = (spec.get("train") or {}).get("epochs")
    e, s, elapsed = int(ck["epoch"]), int(ck.get("step") or 0), float(ck.get("elapsed") or 0.0)
    t_in = float(ck["partial"][3]) if s and ck.get("partial") else 0.0
    left = None
    if epochs is not None and e > 0:
        left = 0.0 if ck.get("stopped") else max(0.0, (int(epochs) - e) * elapsed / e - t_in)
    stop = stop_rule(ck, spec.get("train") or {})
    last = next((h for h in reversed(ck.get("history") or []) if h.get("epoch", 0) >= 1), {})
    val = {k[4:]: v for k, v in last.items() if k.startswith("val_") and isinstance(v, (int, float))}
    return {"run": folder.relative_to(root).as_posix(), "epoch": e, "step": s, "epochs": epochs,
            "state": "cut (metrics.json kept)" if (folder / "metrics.json").exists() else
                     "stopped early" if ck.get("stopped") else "in progress",
            "pid": (pids or {}).get(folder.resolve()),
            "trained_h": (elapsed + t_in) / 3600, "left_h": None if left is None else left / 3600,
            "age_min": ((now or time.time()) - ckpt.stat().st_mtime) / 60, "val": val, "stop": stop}


def _progress(r: dict) -> str:
    done = f"{r['epoch']}/{r['epochs'] if r['epochs'] is not None else '?'}"
    return done + (f" + {r['step']:,} batches" if r["step"] else "")


def _val(v: dict, n: int = 2) -> str:
    return ", ".join(f"{k} {x:.4g}" for k, x in list(v.items())[:n]) or "-"


def status_table(rows: list[dict]) -> str:
    """Markdown: one line per run, the most recently saved first."""
    out = ["| run | state | epochs done | last validation | epochs without a gain (stop at) | trained h | left h (est.) "
           "| saved min ago | training pid |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["age_min"]):
        left = "-" if r["left_h"] is None else f"{r['left_h']:.2f}" + (" at most" if r["stop"] and r["left_h"] else "")
        stop = f"{r['stop'][0]} of {r['stop'][1]}" if r["stop"] else "-"
        out.append(f"| {r['run']} | {r['state']} | {_progress(r)} | {_val(r['val'])} | {stop} | {r['trained_h']:.2f} | "
                   f"{left} | {r['age_min']:.0f} | {r['pid'] or '-'} |")
    return "\n".join(out)


def status(results: Path, scale: str | None = None) -> str:
    """The status table of every checkpointed run under `results` (`results/<scale>` when a scale is named)."""
    root = Path(results) / scale if scale else Path(results)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such results folder (runs write to results/<scale>/...; --results names "
                                "another tree)")
    pids = training_pids()
    rows = [run_status(p, root, pids=pids) for p in sorted(root.rglob(CHECKPOINT))]
    finished = sum(1 for m in root.rglob("metrics.json") if not (m.parent / CHECKPOINT).exists())
    head = f"{root}: {finished} runs finished, {len(rows)} with a checkpoint (in progress, stopped or cut)"
    return head + ("\n\n" + status_table(rows) if rows else "")
