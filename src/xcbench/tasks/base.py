"""A task binds a dataset's prepared arrays to batches and to its evaluation protocol.

    Task(exp, dataset entry, paths, device, seed)
      .in_dim, .n_classes, .stats          sizes and training-set statistics for `Head.setup`
      .train_batches(batch_size, gen)      one epoch of (x, y, idx) batches, order from `gen`
      .evaluate(model, split)              {metric name: value} on "val" or "test"
      .eval_splits, .eval_at_start         what the loop evaluates per epoch (and before the first)
"""

from __future__ import annotations

from typing import Iterator

import torch


class Task:
    eval_splits: tuple[str, ...] = ("val",)  # evaluated after every epoch, keys prefixed "<split>_"
    eval_at_start = False                    # also evaluate before the first epoch (curves from epoch 0)

    def train_batches(self, batch_size: int, gen: torch.Generator) -> Iterator[tuple[torch.Tensor, ...]]:
        raise NotImplementedError

    def n_train_batches(self, batch_size: int) -> int:
        raise NotImplementedError

    def evaluate(self, model: torch.nn.Module, split: str) -> dict[str, float]:
        raise NotImplementedError


def shuffled_batches(n: int, batch_size: int, gen: torch.Generator, drop_last: bool = False):
    """Index batches of a random permutation of range(n) drawn from `gen`."""
    perm = torch.randperm(n, generator=gen)
    stop = n - n % batch_size if drop_last else n
    for s in range(0, stop, batch_size):
        yield perm[s:s + batch_size]
