"""MIDX-exact: Theorem 1 of the MIDX paper on the product-quantized index of samplers/midx.py.

The residual r_i = c_i - [u_{a_i}; v_{b_i}] of every class enters the last of three stages:
  P(k, l) ∝ exp(s_{k,l}) psi_{k,l},  psi_{k,l} = sum_{i in Omega_{k,l}} exp(tau h.r_i),
  P(i | k, l) = exp(tau h.r_i) / psi_{k,l}     =>  q(i | h) = softmax(tau h.c)_i exactly,
at O(n d) a query, like the full softmax: the decomposition behind MIDX's approximation (Theorem 2 drops
the residuals), kept as an exact proposal to test the index against. It draws by these stages, so it takes
no `draw` option.
"""

from __future__ import annotations

import math

import torch

from xcbench.registry import SAMPLERS
from xcbench.samplers.midx import MIDX, ProductQuantized
from xcbench.seed import multinomial


@SAMPLERS.register("midx_exact")
class MIDXExact(ProductQuantized, MIDX):
    """Theorem 1 on the product-quantized index: the three stages multiply to softmax(tau h.c)."""

    def __init__(self, n_classes: int, K: int = 32, tau: float = 1.0, max_iter: int = 100, points_per_codeword: int = 256):
        super().__init__(n_classes, K, tau, max_iter, points_per_codeword)  # draws by its own stages: no `draw`

    def stages(self, h: torch.Tensor) -> torch.Tensor:
        """log P(cell of i) + log P(i | cell) for every class: (B, n), computed stage by stage."""
        hr = self.tau * h.detach().to(self.c.dtype) @ (self.c - self.quantized()).T            # (B, n) tau h.r_i
        cell = self.a * self.K + self.b                                                        # (n,)
        log_psi = torch.full((h.shape[0], self.K * self.K), -math.inf, dtype=hr.dtype, device=h.device)
        log_psi = log_psi.scatter_reduce(1, cell.expand_as(hr), hr, "amax")                    # max per cell
        log_psi = log_psi + torch.zeros_like(log_psi).index_add_(
            1, cell, (hr - log_psi.gather(1, cell.expand_as(hr))).exp()).log()                 # log psi_{k,l}
        log_cell = torch.log_softmax(self.cell_scores(h) + log_psi, 1)                         # log P(k, l)
        return log_cell.gather(1, cell.expand_as(hr)) + hr - log_psi.gather(1, cell.expand_as(hr))

    def sample(self, h, m, gen):
        return self.sample_with(h, m, gen, None)[:2]

    def sample_with(self, h, m, gen, targets):
        lp = self.stages(h)                                                                    # (B, n), once
        ids = multinomial(lp.exp(), m, gen)                                                   # (B, m)
        return (ids, lp.gather(1, ids).float()) + (() if targets is None else (lp.gather(1, targets).float(),))

    def log_prob(self, h, ids):
        return self.stages(h).gather(1, ids).float()
