"""LSH sampler (Spring & Shrivastava 2017, "A new unbiased and efficient class of LSH-based samplers
and estimators for partition function computation"; the MIDX paper's LSH baseline).

L hash tables, each keyed by K SimHash bits sign(P_t,k . z) of a fixed Gaussian hyperplane set
P (L, K, d) drawn from `seed` (so a class and a query hash with the same functions). The classes
are bucketed at every epoch start (`update`). A draw for query h:
  1. pick a table t uniformly among the tables whose bucket of h, B_t(h), holds a class;
  2. pick a class uniformly in B_t(h).
Its exact probability, with T(h) the tables with a non-empty bucket:
  q(i | h) = (1 / |T(h)|) sum_{t in T(h)} 1[i in B_t(h)] / |B_t(h)|
(q = 1/n for a query whose L buckets are all empty). Spring & Shrivastava write the probability of
a class as its collision probability cp(h, c)^K over the random hash draw, divided by the bucket
size; that is the expectation of the expression above over the hyperplanes. For the fixed tables
the sampler uses, the expression above is the probability of the draw, so the log-q correction is
exact. A class in no bucket of h has q = 0: the proposal covers only classes that collide with h.
Defaults: 16 tables x 4 bits (the public MIDX code's LSH index).
"""

from __future__ import annotations

import torch

from xcbench.registry import SAMPLERS
from xcbench.samplers.base import Sampler
from xcbench.seed import multinomial, rand, randint


@SAMPLERS.register("lsh")
class LSH(Sampler):
    needs_index = True

    def __init__(self, n_classes: int, tables: int = 16, bits: int = 4, seed: int = 0) -> None:
        super().__init__(n_classes)
        self.L, self.K, self.seed = tables, bits, seed
        self.P: torch.Tensor | None = None       # (L, K, d) hyperplanes
        self.codes: torch.Tensor | None = None   # (n, L) bucket of every class in every table
        self.order = self.start = self.count = None

    def hash(self, z: torch.Tensor) -> torch.Tensor:
        """Bucket ids (N, L) in [0, 2^K): the K sign bits of each table read as a binary number."""
        bits = torch.einsum("nd,lkd->nlk", z.to(self.P.dtype), self.P) > 0                    # (N, L, K)
        return (bits.long() << torch.arange(self.K, device=z.device)).sum(2)                 # (N, L)

    def update(self, class_emb, gen):
        c = class_emb.detach()
        if self.P is None or self.P.shape[2] != c.shape[1] or self.P.device != c.device:
            g = torch.Generator().manual_seed(self.seed)
            self.P = torch.randn(self.L, self.K, c.shape[1], generator=g).to(c)
        self.codes = self.hash(c)                                                             # (n, L)
        nb = 1 << self.K
        key = self.codes + torch.arange(self.L, device=c.device) * nb                        # (n, L) global bucket
        self.order = torch.argsort(key.T.reshape(-1), stable=True) % self.n_classes          # (L n,) classes by bucket
        self.count = torch.bincount(key.reshape(-1), minlength=self.L * nb)                  # (L 2^K,)
        self.start = torch.cumsum(self.count, 0) - self.count

    def _buckets(self, h):
        """Global bucket ids (B, L) of the queries and their sizes (B, L)."""
        qb = self.hash(h.detach()) + torch.arange(self.L, device=h.device) * (1 << self.K)
        return qb, self.count[qb]

    def sample(self, h, m, gen):
        qb, size = self._buckets(h)                                                           # (B, L)
        w = (size > 0).double()
        empty = w.sum(1) == 0                                                                 # (B,) no bucket holds a class
        t = multinomial(torch.where(empty.unsqueeze(1), 1.0, w), m, gen)                       # (B, m)
        b = qb.gather(1, t)                                                                   # (B, m) chosen bucket
        u = rand(t.shape, gen, h.device)
        pos = (u * self.count[b]).long().clamp(max=(self.count[b] - 1).clamp(min=0))
        ids = self.order[(self.start[b] + pos).clamp(max=len(self.order) - 1)]
        uni = randint(self.n_classes, t.shape, gen, h.device)
        ids = torch.where(empty.unsqueeze(1), uni, ids)
        return ids, self.log_prob(h, ids)

    def log_prob(self, h, ids):
        qb, size = self._buckets(h)                                                           # (B, L)
        n_ne = (size > 0).sum(1, keepdim=True)                                                # (B, 1)
        cb = self.codes[ids] + torch.arange(self.L, device=h.device) * (1 << self.K)          # (B, m, L)
        hit = (cb == qb.unsqueeze(1)).double()                                                # (B, m, L)
        q = (hit / size.clamp(min=1).unsqueeze(1)).sum(2) / n_ne.clamp(min=1)                 # (B, m)
        q = torch.where(n_ne == 0, 1.0 / self.n_classes, q)
        return q.log().float()
