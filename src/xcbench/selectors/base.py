"""Active-class selection for selective softmax (Zhang et al. 2018, "Accelerated training for massive
classification via dynamic class selection", section "Selective Softmax").

    bind(W)                       the head's (C, d) class-weight Parameter, read where a selector needs
                                  the current weights (`optimal`); no copy
    update(class_emb, gen)        rebuild the structure (hashing forest, k-means, PCA codes) from a
                                  snapshot of the class embeddings; indexed selectors only
    candidates(h, y, q, gen)      per-example proposals (any shape, repeats allowed), q per example
    select(h, y, k, gen) -> S     the batch's active set: sorted unique ids, the labels y always in it,
                                  the union of every example's q = ceil(k / B) candidates. S may hold
                                  more than k classes: the head caps it at k by sampling on the
                                  renormalised probabilities (heads/selective_softmax.py)
    budget(k) -> k                the active-set size to use (HF-A adapts it)

Indexed selectors keep the snapshot they were built from and the seed of the build, so a resumed
run rebuilds exactly the same structure (the snapshot costs one (C, d) copy).
"""

from __future__ import annotations

import importlib
import math

import torch
from torch import nn


class Selector(nn.Module):
    needs_index = False
    requires: str | None = None  # an optional library (module name) the selector needs, e.g. "faiss"
    extra: str | None = None     # the package extra that installs it: pip install -e ".[extra]"

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = n_classes
        self._W: list[torch.Tensor] = []

    def library(self):
        """The library this selector `requires`, imported, or an ImportError that says how to install it."""
        try:
            return importlib.import_module(self.requires)
        except ImportError:
            raise ImportError(f"selector {self.registry_name} needs {self.requires}: "
                              f"pip install -e \".[{self.extra or self.requires}]\"") from None

    def bind(self, W: torch.Tensor) -> None:
        self._W = [W]

    @property
    def W(self) -> torch.Tensor:
        return self._W[0].detach()

    def update(self, class_emb: torch.Tensor, gen: torch.Generator) -> None:
        """Rebuild the structure from the class embeddings; default no-op."""

    def budget(self, k: int) -> int:
        return k

    def start_epoch(self, epoch: int, progress: float, batch_size: int) -> bool:
        """Hook at each epoch start (progress in [0, 1]); True when the structure must be rebuilt now
        (HF-A's phases); default: nothing to do."""
        return False

    def observe(self, probe_logits: torch.Tensor) -> None:
        """Hook after each epoch with the probe batch's full logits (P, C) (HF-A reads its CP_K curve); default no-op."""

    def candidates(self, h: torch.Tensor, y: torch.Tensor, q: int, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def select(self, h: torch.Tensor, y: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
        q = max(1, math.ceil(k / len(h)))
        return torch.unique(torch.cat([y, self.candidates(h, y, q, gen).reshape(-1)]))      # sorted


def draw_seed(gen: torch.Generator) -> int:
    return int(torch.randint(0, 2 ** 62, (1,), generator=gen, device=gen.device).item())


class IndexedSelector(Selector):
    """A selector with a structure built from a snapshot of the class embeddings (`build`), rebuilt by
    the head every `rebuild_every` steps (None: built once)."""
    needs_index = True

    def __init__(self, n_classes: int, rebuild_every: int | None = 100) -> None:
        super().__init__(n_classes)
        self.rebuild_every = rebuild_every
        self.register_buffer("snapshot", torch.zeros(0))
        self.register_buffer("build_seed", torch.zeros((), dtype=torch.long))

    def build(self, E: torch.Tensor, gen: torch.Generator) -> None:
        raise NotImplementedError

    def update(self, class_emb, gen):
        self.snapshot = class_emb.detach().clone()
        self.build_seed.fill_(draw_seed(gen))
        self._rebuild()

    def _rebuild(self) -> None:
        # a CPU stream whatever the snapshot's device: the builds draw on it and move the draws, so a CUDA
        # run builds the CPU run's trees, codes and clusters (CUDA's generator gives other numbers)
        g = torch.Generator().manual_seed(int(self.build_seed))
        self.build(self.snapshot, g)

    @property
    def built(self) -> bool:
        return self.snapshot.numel() > 0

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "snapshot"
        if key in state_dict:
            self.snapshot = torch.empty_like(state_dict[key], device=self.snapshot.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self.built:
            self._rebuild()


def groups_of(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Classes grouped by an integer key (cluster, hash code): (classes sorted by key, sorted keys)."""
    order = torch.argsort(keys, stable=True)
    return order, keys[order]


def members(order: torch.Tensor, sorted_keys: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
    """Every class whose key is one of `wanted` (repeats allowed): a flat id tensor."""
    wanted = torch.unique(wanted)
    lo = torch.searchsorted(sorted_keys, wanted)
    n = torch.searchsorted(sorted_keys, wanted, right=True) - lo                            # group sizes
    start = torch.repeat_interleave(lo, n)
    offs = torch.arange(int(n.sum()), device=order.device) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
    return order[start + offs]
