"""LR schedules (SCHEDULES registry): each epoch's learning rate from the base lr.

  constant: lr;   cosine: lr (1 + cos(pi * epoch / T)) / 2   (per-epoch cosine decay; T the run's epochs,
  or `cosine: {epochs: T}`).
`Plateau` (schedule: plateau) instead follows a validation metric, as Schultheis & Babbar (2023)
train: multiply the lr by `factor` after `patience` epochs without an improvement of `min_delta`
(never below `min_lr`), and stop after `stop_patience` epochs without improvement. `mode` says
whether higher (max, default: P@k) or lower (min: perplexity) is better (selection.improves).
Torch-free: captions read Plateau's defaults from here; xcbench.optim imports it, so a SCHEDULES
lookup finds these.
"""

from __future__ import annotations

import inspect
import math

from xcbench.registry import SCHEDULES
from xcbench.selection import improves, val_value, worst


class Schedule:
    """lr of an epoch from the base lr; `observe` sees each epoch's validation metrics and may stop
    the run. A schedule's settings sit under a train-config key of its own name (`plateau: {...}`)."""

    def __init__(self, lr: float) -> None:
        self.base = lr

    def lr_at(self, epoch: int, epochs: int) -> float:
        return self.base

    def observe(self, evals: dict) -> bool:
        return False

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, st: dict) -> None:
        pass


@SCHEDULES.register("constant")
class Constant(Schedule):
    pass


@SCHEDULES.register("cosine")
class Cosine(Schedule):
    """`train: {cosine: {epochs: T}}` fixes the cosine's length at the paper's T epochs, so that a shorter run
    (the quick scale) follows the first epochs of the paper's schedule instead of a compressed one."""

    def __init__(self, lr: float, epochs: int | None = None) -> None:
        super().__init__(lr)
        self.length = epochs

    def lr_at(self, epoch, epochs):
        return self.base * (0.5 * (1.0 + math.cos(math.pi * epoch / max(1, self.length or epochs))))


@SCHEDULES.register("plateau")
class Plateau(Schedule):
    def __init__(self, lr: float, metric: str = "P@3", factor: float = 0.5, patience: int = 2,
                 min_lr: float = 1e-4, stop_patience: int = 4, min_delta: float = 1e-3, mode: str = "max") -> None:
        super().__init__(lr)
        self.metric, self.factor, self.patience, self.min_lr = metric, factor, patience, min_lr
        self.stop_patience, self.min_delta, self.mode = stop_patience, min_delta, mode
        self.lr, self.best, self.bad, self.bad_lr = lr, worst(mode), 0, 0

    def lr_at(self, epoch, epochs):
        return self.lr

    def observe(self, evals: dict) -> bool:
        return self.update(val_value(evals, self.metric, "plateau"))

    def update(self, value: float) -> bool:
        """Record this epoch's metric; returns True when training should stop."""
        if improves(value, self.best, self.mode, self.min_delta):
            self.best, self.bad, self.bad_lr = value, 0, 0
            return False
        self.bad, self.bad_lr = self.bad + 1, self.bad_lr + 1
        if self.bad_lr >= self.patience and self.lr > self.min_lr:
            self.lr, self.bad_lr = max(self.min_lr, self.lr * self.factor), 0
        return self.bad >= self.stop_patience

    def state_dict(self) -> dict:
        return {"lr": self.lr, "best": self.best, "bad": self.bad, "bad_lr": self.bad_lr}

    def load_state_dict(self, st: dict) -> None:
        self.lr, self.best, self.bad, self.bad_lr = st["lr"], st["best"], st["bad"], st["bad_lr"]


def plateau_settings(train_cfg: dict) -> dict | None:
    """The plateau schedule's settings of a train config, Plateau's defaults where unset; None for another schedule."""
    if train_cfg.get("schedule", "constant") != "plateau":
        return None
    defaults = {k: v.default for k, v in inspect.signature(Plateau).parameters.items() if k != "lr"}
    return defaults | (train_cfg.get("plateau") or {})
