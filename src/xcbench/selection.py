"""Model selection and early stopping: one mechanism for every run (docs/design.md, Interfaces).

`select: {metric, mode, patience, min_delta}` in a train config. After every epoch the validation
value v of `metric` is compared with the best so far, b:
    improved  <=>  v < b - min_delta  (mode min: perplexity, CE)  or  v > b + min_delta  (mode max)
On improvement the epoch's weights are kept (in the checkpoint, so a resumed run selects the same
epoch); training stops after `patience` epochs in a row without improvement; `test` is evaluated
on the best epoch's weights and `metrics.json` records `best_epoch`. The MIDX paper early-stops
LMs on validation perplexity and recommenders on NDCG@10 with patience 10 (section 6).
"""

from __future__ import annotations

import copy
import math

MODES = ("min", "max")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"selection mode must be one of {MODES}, got {mode!r}")
    return mode


def improves(value: float, best: float, mode: str, min_delta: float = 0.0) -> bool:
    check_mode(mode)
    return value < best - min_delta if mode == "min" else value > best + min_delta


def worst(mode: str) -> float:
    return math.inf if mode == "min" else -math.inf


def val_value(evals: dict, metric: str, who: str) -> float:
    """The validation value of `metric` (key val_<metric>) among an epoch's evaluations."""
    k = f"val_{metric}"
    if k not in evals:
        raise KeyError(f"{who}.metric {metric!r}: no {k!r} among the validation metrics "
                       f"{sorted(e[4:] for e in evals if e.startswith('val_'))}")
    return float(evals[k])


class BestEpoch:
    def __init__(self, metric: str, mode: str = "max", patience: int | None = None, min_delta: float = 0.0) -> None:
        self.metric, self.mode, self.patience, self.min_delta = metric, check_mode(mode), patience, min_delta
        self.best, self.best_epoch, self.bad = worst(mode), 0, 0
        self.state: dict | None = None  # the best epoch's model state_dict (CPU copies)

    def update(self, epoch: int, evals: dict, model) -> bool:
        """Record an epoch; keep the weights when it improves. Returns True when training should stop."""
        v = val_value(evals, self.metric, "select")
        if improves(v, self.best, self.mode, self.min_delta):
            self.best, self.best_epoch, self.bad = v, epoch, 0
            self.state = {k: t.detach().to("cpu", copy=True) for k, t in model.state_dict().items()}
        else:
            self.bad += 1
        return self.patience is not None and self.bad >= self.patience

    def restore(self, model) -> None:
        if self.state is not None:
            model.load_state_dict(self.state)

    def state_dict(self) -> dict:
        return {"best": self.best, "best_epoch": self.best_epoch, "bad": self.bad, "state": self.state}

    def load_state_dict(self, st: dict) -> None:
        self.best, self.best_epoch, self.bad = st["best"], st["best_epoch"], st["bad"]
        self.state = copy.copy(st["state"])
