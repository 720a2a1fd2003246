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

Checkpoints on request (`Signals`): SIGUSR1 asks for one after the current batch, the run going on;
SIGTERM for one there, then an exit with status 143. A batch scheduler's notice at its time limit
(Slurm sends SIGTERM, and SIGKILL KillWait seconds later, 30 by default) or a session's planned end
then costs one step instead of everything since the last timed checkpoint. Only a head that resumes
inside an epoch (`Head.resumes_mid_epoch`) can save between batches; for the others, and outside the
batches (an index build, the evaluation), SIGTERM exits at once, as without the handler, and SIGUSR1
waits for the epoch's own checkpoint.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import torch

from xcbench.runspec import differences

CHECKPOINT = "checkpoint.pt"  # in a run's result folder


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


class Signals:
    """While entered (the main thread only: Python delivers signals there), SIGUSR1 and SIGTERM ask for a
    checkpoint after the current batch (module docstring). `armed`: the loop is inside an epoch's batches
    of a head that can save there; `asked`: the signal waiting for the next batch boundary, or None."""

    def __init__(self, mid_epoch: bool):
        self.mid_epoch, self.armed, self.asked, self._old = mid_epoch, False, None, {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for s in (getattr(signal, "SIGUSR1", None), signal.SIGTERM):  # no SIGUSR1 on Windows
                if s is not None:
                    self._old[s] = signal.signal(s, self._on)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def _on(self, signum: int, frame) -> None:
        if signum == signal.SIGTERM and not (self.mid_epoch and self.armed):
            raise SystemExit(128 + signum)  # nothing to save between batches here: the last checkpoint stands
        if not self.mid_epoch:
            warn("SIGUSR1: this head checkpoints at epoch ends only (its state outside the parameters is rebuilt "
                 "at epoch starts); the next one comes after the current epoch")
        elif self.asked != signal.SIGTERM:  # a SIGTERM is never downgraded by a later SIGUSR1
            self.asked = signum

    def saved(self, where: str) -> None:
        """A checkpoint was written at a batch boundary: the request is met; SIGTERM then ends the process."""
        signum, self.asked = self.asked, None
        if signum is None:
            return
        if signum == signal.SIGTERM:
            warn(f"SIGTERM: checkpointed {where}; exiting. The same command resumes there")
            raise SystemExit(128 + signum)
        warn(f"SIGUSR1: checkpointed {where}; going on")
