"""One-vs-all binary losses over every label, for multi-label XMC (Schultheis & Babbar 2023, sec. 3).

With targets t_il in {0, 1} and s_il = 2 t_il - 1, both averaged over all B x C entries:
  sq_hinge:  l = mean_{i,l} max(0, 1 - s_il o_il)^2
  bce:       l = mean_{i,l} [ softplus(o_il) - t_il o_il ]   (binary cross-entropy with logits)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xcbench.heads.base import LinearHead, multi_hot
from xcbench.registry import HEADS


@HEADS.register("sq_hinge")
class SquaredHinge(LinearHead):
    def loss(self, h, y, idx, gen):
        t = multi_hot(y, self.n_classes)                                                # (B, C)
        return torch.relu(1 - (2 * t - 1) * self.scores(h)).square().mean()


@HEADS.register("bce")
class BinaryCrossEntropy(LinearHead):
    def loss(self, h, y, idx, gen):
        return F.binary_cross_entropy_with_logits(self.scores(h), multi_hot(y, self.n_classes))
