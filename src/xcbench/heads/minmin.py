"""Min-min cross-entropy with per-example duals and in-batch negatives (SCENT family).

Book: T. Yang, Compositional Optimization for Advanced ML, section 6.3, Algorithm 26.
For a batch of B examples with labels y (the multiset Y_t), features h and class weights W (K, d):
    Q   = H W[Y_t]^T                       (B, B): every example against every in-batch label
    R_ij = Q_ij - w_{y_i}.h_i,  j != i     (the B - 1 other positions: a multiset of negatives;
                                            positions sharing y_i give R = 0, like j = y_i in the sum)
    nu_i <- rule.update(nu_i, R_i)         (closed form / step of the chosen DUALS rule)
    loss = (1/B) sum_i rule.loss(R_i, nu_i)
W[Y_t] is read through `F.embedding(..., sparse=True)`, so the gradient of W is a sparse tensor
holding only the rows of C_t (the unique batch labels); `row_sgd` then updates those rows and
their momentum only. nu is a float64 buffer indexed by example id, checkpointed with the model.
Evaluation uses the full scores h W^T.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xcbench.heads.base import Head
from xcbench.optim.duals import DUALS
from xcbench.registry import HEADS


@HEADS.register("minmin_ce")
class MinMinCE(Head):
    multi_label = False

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, dual: str = "scent",
                 dual_params: dict | None = None, init_std: float = 0.01) -> None:
        super().__init__(in_dim, n_classes, gen)
        self.rule = DUALS.get(dual)(**(dual_params or {}))
        self.W = nn.Parameter(torch.randn(n_classes, in_dim, generator=gen) * init_std)        # (K, d)
        self.register_buffer("nu", torch.zeros(0, dtype=torch.float64))

    def class_embeddings(self) -> nn.Parameter:
        return self.W

    def setup(self, stats: dict) -> None:
        if self.nu.numel() != stats["n_train"]:
            self.nu = torch.zeros(stats["n_train"], dtype=torch.float64, device=self.W.device)

    def shifted_logits(self, h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Wy = F.embedding(y, self.W, sparse=True)                                               # (B, d)
        Q = h @ Wy.T                                                                           # (B, B)
        R = (Q - (h * Wy).sum(1, keepdim=True)).double()                                       # (B, B)
        mask = ~torch.eye(len(y), dtype=torch.bool, device=y.device)                           # j != i
        return R, mask

    def loss(self, h, y, idx, gen):
        R, mask = self.shifted_logits(h, y)
        if self.rule.uses_nu:
            with torch.no_grad():
                self.nu[idx] = self.rule.update(self.nu[idx], R.detach(), mask)
        return self.rule.loss(R, mask, self.nu[idx]).mean().float()

    def scores(self, h):
        return h @ self.W.T                                                                    # (B, K)
