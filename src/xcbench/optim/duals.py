"""Per-example dual-variable rules for the min-min form of cross-entropy (book section 6.3).

Cross-entropy of example i equals  min_nu { (1/K) sum_j exp(R_ij - nu) + nu - 1 } + log K  with
R_ij = (w_j - w_{y_i}).h_i; the minimiser is nu* = log mean_j exp(R_ij). With in-batch negatives
(the other B - 1 labels of the mini-batch, a multiset) each rule updates nu_i from the (B, B-1)
shifted logits R of its batch, and gives the per-example loss whose gradient updates W.

  scent     proximal mirror descent with phi(nu) = e^-nu (Lemma 5.26), closed form
              nu <- nu + log(1 + alpha m_i) - log(1 + alpha e^nu),   m_i = mean_j exp(R_ij)
            computed as  softplus(log alpha + logmeanexp_j R_ij) - softplus(log alpha + nu): the
            log-sum-exp shift by max_j R_ij and log(1 + alpha e^nu) = nu + log(e^-nu + alpha) of
            the text, in one stable expression.
  sox       the same step with alpha_i = gamma e^-nu_i (a moving average of m_i with weight
            gamma / (1 + gamma)): differs from scent only in the step rule.
  sgd_dual  a stochastic coordinate-gradient step  nu <- nu - eta (1 - mean_j exp(R_ij - nu)).
  bsgd      no dual: the in-batch cross-entropy loss  logsumexp_j R_ij.
W-loss of the dual rules: mean_j exp(R_ij - nu_i) with the updated nu (as in the reference code).
Everything is computed in float64 so that |R|, |nu| up to 80 and beyond stay finite.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from xcbench.registry import DUALS


def logmeanexp(R: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log mean_j exp(R_ij) over the entries where mask is True.  (B,)"""
    Rm = R.masked_fill(~mask, -math.inf)
    return torch.logsumexp(Rm, 1) - torch.log(mask.sum(1).to(R.dtype))


class DualRule:
    uses_nu = True

    def update(self, nu: torch.Tensor, R: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, R: torch.Tensor, mask: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        """Per-example W-loss (B,): mean_j exp(R_ij - nu_i)."""
        E = torch.exp(R - nu.unsqueeze(1)).masked_fill(~mask, 0.0)                      # (B, B)
        return E.sum(1) / mask.sum(1)


def scent_step(nu: torch.Tensor, lme: torch.Tensor, log_alpha: torch.Tensor | float) -> torch.Tensor:
    """Lemma 5.26 closed form: nu + log(1 + alpha e^lme) - log(1 + alpha e^nu), stably."""
    return nu + F.softplus(log_alpha + lme) - F.softplus(log_alpha + nu)


@DUALS.register("scent")
class SCENT(DualRule):
    def __init__(self, alpha: float = 1.0) -> None:
        self.log_alpha = math.log(alpha)

    def update(self, nu, R, mask):
        return scent_step(nu, logmeanexp(R, mask), self.log_alpha)


@DUALS.register("sox")
class SOX(DualRule):
    def __init__(self, gamma: float = 0.1) -> None:
        self.log_gamma = math.log(gamma)

    def update(self, nu, R, mask):
        return scent_step(nu, logmeanexp(R, mask), self.log_gamma - nu)


@DUALS.register("sgd_dual")
class SGDDual(DualRule):
    def __init__(self, lr: float = 0.1) -> None:
        self.lr = lr

    def update(self, nu, R, mask):
        mean = torch.exp(logmeanexp(R, mask) - nu)
        return nu - self.lr * (1.0 - mean)


@DUALS.register("bsgd")
class BSGD(DualRule):
    uses_nu = False

    def update(self, nu, R, mask):
        return nu

    def loss(self, R, mask, nu):
        return torch.logsumexp(R.masked_fill(~mask, -math.inf), 1)
