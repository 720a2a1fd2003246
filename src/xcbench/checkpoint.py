"""Checkpoints that know their run: load one only when it belongs to the run that asks for it.

A checkpoint stores the run spec it was made under: the resolved settings that change what is
trained (dataset, method, seed, head and its params, train, model, task, and the package version),
not presentation (notes, captions, literature rows) nor the `finish` and `stop_after` flags. On resume:
- the same spec: resume after its last epoch;
- another spec (a config edit after a crash): the run starts afresh, with a warning naming every
  differing key; the old file is kept aside as `checkpoint.pt.stale`. Starting afresh rather than
  refusing keeps the DAG's contract: a changed setting reruns the run, and the result records only
  the settings it was trained with (history.csv never mixes two settings);
- a file that cannot be read (truncated, empty, garbage, zeros): a warning naming the file says it
  is damaged, it is moved aside to `checkpoint.pt.bad`, and the run starts from scratch. The file is
  read with `weights_only=True` always: torch's advice to retry with `weights_only=False` is not
  followed (it would execute a damaged or foreign pickle);
- a checkpoint made before specs were stored: resumed, with a warning that it cannot be checked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from xcbench.runspec import differences


def _aside(path: Path, suffix: str) -> Path:
    dest = path.with_name(path.name + suffix)
    os.replace(path, dest)
    return dest


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr, flush=True)


def load_checkpoint(path: Path, spec: dict | None) -> dict | None:
    """The checkpoint at `path` when it exists, is readable and belongs to `spec`; None otherwise
    (the run starts from scratch), with the reason printed. Read onto the CPU whatever device the run
    trains on: the model's and optimizer's load_state_dict copy to their parameters' device, the best
    epoch's weights are kept as CPU copies, and a generator's set_state takes a CPU byte tensor only (a
    CUDA run read to its device could not resume: 'RNG state must be a torch.ByteTensor', on an H200)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        ck = torch.load(path, weights_only=True, map_location="cpu")
        if not isinstance(ck, dict) or "model" not in ck or "epoch" not in ck:
            raise ValueError("not a training checkpoint (no model state or epoch)")
    except Exception as e:  # noqa: BLE001 - any unreadable file: truncated, empty, garbage, foreign pickle
        bad = _aside(path, ".bad")  # torch's own message is not relayed: it may advise weights_only=False
        warn(f"{path}: the checkpoint is damaged and cannot be read ({type(e).__name__}; truncated, empty or not a "
             f"checkpoint of this package); kept aside as {bad}, the run starts from scratch")
        return None
    stored = ck.get("spec")
    if spec is not None and stored is None:
        warn(f"{path}: made before checkpoints recorded their run spec; resuming without checking the settings")
    elif spec is not None and stored != spec:
        diff = differences(stored, spec)
        stale = _aside(path, ".stale")
        warn(f"{path}: the checkpoint was made with other settings ({'; '.join(diff)}); kept aside as {stale}, "
             f"the run starts afresh with the current settings")
        return None
    return ck


class StopAfter(Exception):
    """A run paused where `xcbench train --stop-after N` asked (FitOptions.stop_after), its checkpoint kept."""


def stop_after(n: int | None, done: int, epochs: int, out_dir: Path) -> None:
    """Raise StopAfter once `done` epochs reach `n` (when set)."""
    if n is not None and done >= int(n):
        raise StopAfter(f"{out_dir}: stopped after epoch {done} of {epochs} (--stop-after {n}); its checkpoint stays: "
                        "`--finish` tests its best epoch so far, the same command without --stop-after goes on")


def set_generator_state(gen: torch.Generator, state: torch.Tensor, ckpt_path: Path) -> None:
    """Restore a generator from a checkpoint, naming the setting when the checkpoint's draws were made on
    another kind of device (a CPU generator's state is 5,056 bytes, a CUDA one's 16)."""
    try:
        gen.set_state(state)
    except RuntimeError as e:
        raise ValueError(f"{ckpt_path}: its generator state does not fit this run's {gen.device.type} generator "
                         f"({e}); resume with the `train.draws` and device it was saved with") from None
