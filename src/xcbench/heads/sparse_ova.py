"""Sparse last layers with one-vs-all losses (Schultheis & Babbar 2023): `uniform_sparse` (fixed
fan-in s per label, sparse/uniform.py) and `unstructured_sparse` (COO with the same s * m
weights, sparse/unstructured.py), both rewired every `rewire_interval` steps (sparse/rewire.py).
The loss (`sq_hinge` or `bce`, heads/ova.py) is over all labels. Weights start U(-1/sqrt(s),
1/sqrt(s)) (our choice: the paper's code applies glorot to the flattened weight vector, which
gives far smaller values), biases 0; the rewiring stream is seeded per step from a stored seed so
resumed runs rewire identically.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from xcbench.heads.base import Head, multi_hot
from xcbench.registry import HEADS, LOSSES
from xcbench.sparse.rewire import regrow_fixed_fan_in, reset_moments, smallest
from xcbench.sparse.uniform import distinct_random_indices, ffi_impl, ffi_linear
from xcbench.sparse.unstructured import coo_linear, random_positions


class SparseOvA(Head):
    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, fan_in: int = 32, loss: str = "sq_hinge",
                 rewire_interval: int = 1000, rewire_fraction: float = 0.1) -> None:
        super().__init__(in_dim, n_classes, gen)
        self.fan_in, self.loss_fn = fan_in, LOSSES.get(loss)
        self.rewire_interval, self.rewire_fraction = rewire_interval, rewire_fraction
        self.register_buffer("rewire_seed", torch.randint(0, 2**62, (1,), generator=gen))
        self.register_buffer("bwd_stats", torch.zeros(2, dtype=torch.float64))  # [labels back-propagated, seen]
        self.register_buffer("epoch_stats", torch.zeros(2, dtype=torch.float64), persistent=False)  # at epoch start
        self.c = nn.Parameter(torch.zeros(n_classes))                                   # (m,)

    def loss(self, h, y, idx, gen):
        return self.loss_fn(self.scores(h), multi_hot(y, self.n_classes))

    @staticmethod
    def _share(stats: torch.Tensor) -> dict:
        a, n = stats.tolist()
        return {"backprop_label_share": a / n} if n else {}

    def report(self) -> dict:
        return self._share(self.bwd_stats)

    def on_epoch_start(self, step: int, gen: torch.Generator) -> None:
        self.epoch_stats.copy_(self.bwd_stats)

    def epoch_metrics(self, h, y) -> dict:
        """Share of (example, label) pairs with a non-zero loss gradient during this epoch."""
        return self._share(self.bwd_stats - self.epoch_stats)

    def after_step(self, step: int, optimizer) -> None:
        if self.rewire_interval > 0 and self.rewire_fraction > 0 and step % self.rewire_interval == 0:
            g = torch.Generator().manual_seed(int(self.rewire_seed) + step)
            with torch.no_grad():
                self.rewire(optimizer, g)


@HEADS.register("uniform_sparse")
class UniformSparse(SparseOvA):
    def __init__(self, in_dim, n_classes, gen, **kw):
        super().__init__(in_dim, n_classes, gen, **kw)
        s = self.fan_in
        if s >= in_dim and self.rewire_interval > 0 and self.rewire_fraction > 0:
            raise ValueError(f"uniform_sparse: fan-in {s} >= {in_dim} inputs leaves no free input to rewire to; "
                             "use a smaller fan_in or a larger intermediate layer, or set rewire_interval: 0")
        self.register_buffer("I", distinct_random_indices(in_dim, s, n_classes, gen))   # (s, m) int32
        bound = 1.0 / math.sqrt(s)
        self.W = nn.Parameter(torch.empty(s, n_classes).uniform_(-bound, bound, generator=gen))  # (s, m)

    def scores(self, h):
        return ffi_linear(h, self.W, self.c, self.indices(h.device), self.bwd_stats if self.training else None)

    def indices(self, device) -> torch.Tensor:
        """I in the index dtype of the layer's implementation on `device`: the int32 buffer itself for
        the Triton kernels, an int64 copy (index_select's type) for the torch path, converted once
        per rewiring."""
        if ffi_impl(device)[2] == self.I.dtype:
            return self.I
        if getattr(self, "_I_long", None) is None or self._I_long.device != device:
            self._I_long = self.I.to(device=device, dtype=torch.long)
        return self._I_long

    def _load_from_state_dict(self, *args, **kwargs):
        self._I_long = None
        super()._load_from_state_dict(*args, **kwargs)

    def rewire(self, optimizer, g):
        self._I_long = None
        flat = smallest(self.W, self.rewire_fraction)
        I = self.I.cpu()
        regrow_fixed_fan_in(I, flat.cpu(), self.in_dim, g)
        self.I.copy_(I)
        reset_moments(optimizer, self.W, flat)


@HEADS.register("unstructured_sparse")
class UnstructuredSparse(SparseOvA):
    def __init__(self, in_dim, n_classes, gen, **kw):
        super().__init__(in_dim, n_classes, gen, **kw)
        rows, cols = random_positions(in_dim, n_classes, self.fan_in * n_classes, gen)
        self.register_buffer("rows", rows)                                              # (nnz,) int32
        self.register_buffer("cols", cols)                                              # (nnz,) int32
        bound = 1.0 / math.sqrt(self.fan_in)
        self.v = nn.Parameter(torch.empty(rows.numel()).uniform_(-bound, bound, generator=gen))  # (nnz,)

    def scores(self, h):
        return coo_linear(h, self.v, self.c, self.rows.to(h.device), self.cols.to(h.device), self.n_classes)

    def rewire(self, optimizer, g):
        flat = smallest(self.v, self.rewire_fraction)
        e = self.in_dim
        keep = torch.ones(self.v.numel(), dtype=torch.bool)
        keep[flat] = False
        taken = self.cols.long()[keep] * e + self.rows.long()[keep]
        new = torch.empty(0, dtype=torch.long)
        while new.numel() < flat.numel():
            cand = torch.randint(0, e * self.n_classes, (flat.numel() - new.numel(),), generator=g)
            cand = torch.unique(cand[~torch.isin(cand, torch.cat([taken, new]))])
            new = torch.cat([new, cand])[: flat.numel()]
        self.rows[flat] = (new % e).int().to(self.rows.device)
        self.cols[flat] = (new // e).int().to(self.cols.device)
        reset_moments(optimizer, self.v, flat)
