"""Sampled softmax with a proposal q (Bengio & Senecal 2008; Rawat et al. 2019, eq. 5).

Logits o_c = tau h . e_c (h, e_c L2-normalised when `normalize`). For target t and m negatives
s_1..s_m drawn i.i.d. with replacement from q(. | h):
    o'_t   = o_t                                   (the positive is not corrected: RF-softmax eq. 5)
    o'_s_j = o_s_j - log(m q(s_j | h))             (log-q correction of every negative)
    o'_s_j = -inf  where s_j == t                  (accidental hits masked)
    loss   = -log softmax([o'_t, o'_s_1 .. o'_s_m])_0
With q = softmax(o) (the `exact` sampler) the expected gradient tends to the full-softmax gradient
as m grows (tests/test_samplers.py). The embeddings' gradient is dense here; only the rows used
are non-zero.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from xcbench.heads.base import Head
from xcbench.registry import HEADS, SAMPLERS


def sampled_softmax_loss(o_t: torch.Tensor, o_s: torch.Tensor, log_q: torch.Tensor, hits: torch.Tensor,
                         m: int) -> torch.Tensor:
    """Per-example loss (B,) from o_t (B,), negatives' logits o_s (B, m), their log q and hit mask."""
    adj = (o_s - log_q - math.log(m)).masked_fill(hits, -math.inf)                       # (B, m)
    logits = torch.cat([o_t.unsqueeze(1), adj], 1)                                       # (B, 1 + m)
    return -torch.log_softmax(logits, 1)[:, 0]


@HEADS.register("sampled_softmax")
class SampledSoftmax(Head):
    multi_label = False

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, sampler: str = "uniform",
                 sampler_params: dict | None = None, m: int = 100, tau: float = 1.0, normalize: bool = False,
                 init_std: float = 0.01) -> None:
        super().__init__(in_dim, n_classes, gen)
        self.E = nn.Parameter(torch.randn(n_classes, in_dim, generator=gen) * init_std)          # (n, d)
        self.sampler = SAMPLERS.get(sampler)(n_classes, **(sampler_params or {}))
        self.m, self.tau, self.normalize = m, tau, normalize

    def setup(self, stats: dict) -> None:
        self.sampler.setup(stats["label_counts"])

    def on_epoch_start(self, step: int) -> None:
        self.sampler.update(self._emb())

    def _emb(self) -> torch.Tensor:
        return F.normalize(self.E, dim=1) if self.normalize else self.E

    def _q(self, h):
        return F.normalize(h, dim=1) if self.normalize else h

    def loss(self, h, y, idx, gen):
        h, E = self._q(h), self._emb()
        if self.sampler.update_every_step:
            self.sampler.update(E)
        ids, log_q = self.sampler.sample(h, self.m, gen)                                       # (B, m)
        o_t = self.tau * (h * E[y]).sum(1)                                                     # (B,)
        o_s = self.tau * torch.einsum("bd,bmd->bm", h, E[ids])                                 # (B, m)
        return sampled_softmax_loss(o_t, o_s, log_q, ids == y.unsqueeze(1), self.m).mean()

    def scores(self, h):
        return self.tau * self._q(h) @ self._emb().T                                           # (B, n)
