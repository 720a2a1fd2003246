"""Weight optimizers (torch's implementations, registered by name) and LR schedules.

Schedules map (epoch, total epochs) to a multiplier of the base learning rate:
  constant: 1;   cosine: (1 + cos(pi * epoch / epochs)) / 2   (per-epoch cosine decay).
"""

from __future__ import annotations

import math

import torch

from xcbench.registry import OPTIMIZERS

OPTIMIZERS.register("adam")(torch.optim.Adam)
OPTIMIZERS.register("sgd")(torch.optim.SGD)
OPTIMIZERS.register("adagrad")(torch.optim.Adagrad)

SCHEDULES = {
    "constant": lambda epoch, epochs: 1.0,
    "cosine": lambda epoch, epochs: 0.5 * (1.0 + math.cos(math.pi * epoch / max(1, epochs))),
}


def schedule(name: str):
    if name not in SCHEDULES:
        raise KeyError(f"unknown lr schedule {name!r}; known: {', '.join(sorted(SCHEDULES))}")
    return SCHEDULES[name]
