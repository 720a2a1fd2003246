"""One-vs-all binary losses over every label, for multi-label XMC (Schultheis & Babbar 2023, sec. 3).

With targets t_il in {0, 1} and s_il = 2 t_il - 1, both averaged over all B x C entries:
  sq_hinge:  l = mean_{i,l} max(0, 1 - s_il o_il)^2     (zero gradient once the margin is met)
  bce:       l = mean_{i,l} [ softplus(o_il) - t_il o_il ]   (binary cross-entropy with logits)
The LOSSES registry maps the name to the pure function; the dense heads and the sparse layers share it.

The squared hinge runs as one autograd function: with r = max(0, 1 - s o) and N = B C its gradient is
    dl/do = -s (2 (g / N)) r        (g the loss's incoming gradient)
formed in two passes over (B, C) where autograd's chain of six element-wise ops took about a dozen, and
bit for bit what that chain gives (s = +-1 and the factor 2 are exact; the test compares with torch.equal).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xcbench.heads.base import LinearHead, multi_hot
from xcbench.registry import HEADS, LOSSES


class _SquaredHinge(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o, t):
        s = t.mul(2).sub_(1)                                                       # (B, C) +-1
        # a column-major o (the sparse layer's) costs less transposed once than read across inside addcmul;
        # r stays row-major either way, so the mean sums in the same order
        r = torch.addcmul(o.new_ones(()), s, o.contiguous(), value=-1).clamp_min_(0)  # (B, C) max(0, 1 - s o)
        ctx.save_for_backward(s, r)
        return r.square().mean()

    @staticmethod
    def backward(ctx, g):
        s, r = ctx.saved_tensors
        return torch.mul(r, s).mul_(-2 * (g / r.numel())), None                 # (B, C)


@LOSSES.register("sq_hinge")
def sq_hinge_loss(o: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return _SquaredHinge.apply(o, t)


@LOSSES.register("bce")
def bce_loss(o: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(o, t)


@HEADS.register("sq_hinge")
class SquaredHinge(LinearHead):
    resumes_mid_epoch = True

    def loss(self, h, y, idx, gen):
        return sq_hinge_loss(self.scores(h), multi_hot(y, self.n_classes))


@HEADS.register("bce")
class BinaryCrossEntropy(LinearHead):
    resumes_mid_epoch = True

    def loss(self, h, y, idx, gen):
        return bce_loss(self.scores(h), multi_hot(y, self.n_classes))
