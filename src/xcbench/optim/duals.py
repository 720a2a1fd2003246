"""Per-example dual-variable rules for the min-min form of cross-entropy (book section 6.3).

Cross-entropy of example i equals  min_nu { (1/K) sum_j exp(R_ij - nu) + nu - 1 } + log K  with
R_ij = (w_j - w_{y_i}).h_i; the minimiser is nu* = log mean_j exp(R_ij). With in-batch negatives
(the other B - 1 labels of the mini-batch, a multiset) each rule updates nu_i from the (B, B-1)
shifted logits R of its batch (m_i = mean_j exp(R_ij)), and gives the per-example loss whose
gradient updates W: mean_j exp(R_ij - nu_i) at the updated nu (`loss_at_updated`) or at the old one.

  scent     proximal mirror descent with phi(nu) = e^-nu (Lemma 5.26), closed form
              nu <- nu + log(1 + alpha m_i) - log(1 + alpha e^nu)
            computed as  softplus(log alpha + logmeanexp_j R_ij) - softplus(log alpha + nu): the
            log-sum-exp shift by max_j R_ij and log(1 + alpha e^nu) = nu + log(e^-nu + alpha) of
            the text, in one stable expression. Loss at the updated nu.
  sox       the moving average  e^nu <- (1 - g_t) e^nu + g_t m_i  (SCENT with alpha_i =
            g/(1-g) e^-nu_i; the book's alpha = gamma e^-nu is g = gamma/(1+gamma)). As the reference
            code runs it, g_t is cosine-scheduled per epoch t = 1..T from `gamma_start` = 1 down to
            `gamma`:  g_t = gamma + (1 - gamma) (1 + cos(pi t/T))/2. Loss at the updated nu.
  sgd_dual  (the reference's ASGD) a coordinate-gradient step  nu <- nu - eta_t (1 - m_i e^-nu),
            eta_t = eta (1 + cos(pi t/T))/2 (`schedule: cosine`, the reference) or eta. Loss at the
            old nu (the gradient of W is taken at the nu the step started from).
  umax      the same step, then a reset  nu <- logmeanexp_j R_ij  wherever it fell below it by more
            than `delta` (U-max); loss at the updated (reset) nu.
  asgd_softplus  ASGD on the softplus-smoothed objective  nu + (1/rho) mean_j log(1 + rho e^(R_ij - nu)):
            nu <- nu - eta_t (1 - mean_j s_ij),  s_ij = e^(R_ij - nu) / (1 + rho e^(R_ij - nu)),
            W-loss (1/rho) mean_j log(1 + rho e^(R_ij - nu)) at the old nu.
  bsgd      no dual: the in-batch cross-entropy loss  logsumexp_j R_ij.
The head (heads/minmin.py) sets nu_i = logmeanexp_j R_ij at an example's first visit, for every rule,
as the reference code does. Everything is float64 so that |R|, |nu| up to 80 and beyond stay finite.
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


def cosine_factor(epoch: int, epochs: int) -> float:
    """(1 + cos(pi t/T)) / 2 at epoch t = 1..T: the reference code's per-epoch dual schedule."""
    return 0.5 * (1.0 + math.cos(math.pi * epoch / max(1, epochs)))


def scent_step(nu: torch.Tensor, lme: torch.Tensor, log_alpha: torch.Tensor | float) -> torch.Tensor:
    """Lemma 5.26 closed form: nu + log(1 + alpha e^lme) - log(1 + alpha e^nu), stably."""
    return nu + F.softplus(log_alpha + lme) - F.softplus(log_alpha + nu)


class DualRule:
    uses_nu = True
    loss_at_updated = True   # the W-loss reads the nu after this batch's update (else the one before)

    def set_progress(self, epoch: int, epochs: int) -> None:
        """Called at the start of epoch t = 1..T (per-epoch schedules)."""

    def update(self, nu: torch.Tensor, R: torch.Tensor, mask: torch.Tensor,
               lme: torch.Tensor | None = None) -> torch.Tensor:
        """nu_i after this batch (B,); `lme` = logmeanexp(R, mask) where the caller has it (the head does:
        one masked log-sum-exp over the (B, B) logits a step, not two)."""
        return self.move(nu, R, mask, logmeanexp(R, mask) if lme is None else lme)

    def move(self, nu: torch.Tensor, R: torch.Tensor, mask: torch.Tensor, lme: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, R: torch.Tensor, mask: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        """Per-example W-loss (B,): mean_j exp(R_ij - nu_i)."""
        E = torch.exp(R - nu.unsqueeze(1)).masked_fill(~mask, 0.0)                      # (B, B)
        return E.sum(1) / mask.sum(1)


@DUALS.register("scent")
class SCENT(DualRule):
    def __init__(self, alpha: float = 1.0) -> None:
        self.log_alpha = math.log(alpha)

    def move(self, nu, R, mask, lme):
        return scent_step(nu, lme, self.log_alpha)


@DUALS.register("sox")
class SOX(DualRule):
    def __init__(self, gamma: float = 0.1, gamma_start: float = 1.0, schedule: str = "cosine") -> None:
        if not (0.0 < gamma <= 1.0 and 0.0 < gamma_start <= 1.0):
            raise ValueError(f"sox: gamma and gamma_start are moving-average weights in (0, 1], got {gamma}, {gamma_start}")
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"sox: schedule must be 'cosine' or 'constant', got {schedule!r}")
        self.gamma_end, self.gamma_start, self.schedule = gamma, gamma_start, schedule
        self.gamma = gamma_start if schedule == "cosine" else gamma

    def set_progress(self, epoch, epochs):
        if self.schedule == "cosine":
            self.gamma = self.gamma_end + (self.gamma_start - self.gamma_end) * cosine_factor(epoch, epochs)

    def move(self, nu, R, mask, lme):
        stay = math.log1p(-self.gamma) if self.gamma < 1.0 else -math.inf
        return torch.logaddexp(nu + stay, lme + math.log(self.gamma))


class _DualSGD(DualRule):
    """Shared by the SGD-type rules: a step size eta, cosine-decayed to 0 per epoch by default."""
    loss_at_updated = False

    def __init__(self, lr: float = 0.1, schedule: str = "cosine") -> None:
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"{self.registry_name}: schedule must be 'cosine' or 'constant', got {schedule!r}")
        self.lr0, self.schedule, self.lr = lr, schedule, lr

    def set_progress(self, epoch, epochs):
        self.lr = self.lr0 * (cosine_factor(epoch, epochs) if self.schedule == "cosine" else 1.0)


@DUALS.register("sgd_dual")
class SGDDual(_DualSGD):
    def step(self, nu: torch.Tensor, lme: torch.Tensor) -> torch.Tensor:
        """nu - eta (1 - m e^-nu) with lme = log m."""
        return nu - self.lr * (1.0 - torch.exp(lme - nu))

    def move(self, nu, R, mask, lme):
        return self.step(nu, lme)


@DUALS.register("umax")
class UMax(SGDDual):
    loss_at_updated = True

    def __init__(self, lr: float = 0.1, delta: float = 1.0, schedule: str = "cosine") -> None:
        super().__init__(lr, schedule)
        self.delta = delta

    def move(self, nu, R, mask, lme):
        stepped = self.step(nu, lme)
        return torch.where(stepped < lme - self.delta, lme, stepped)


@DUALS.register("asgd_softplus")
class ASGDSoftplus(_DualSGD):
    def __init__(self, lr: float = 0.1, rho: float = 1e-3, schedule: str = "cosine") -> None:
        super().__init__(lr, schedule)
        self.log_rho, self.rho = math.log(rho), rho

    def move(self, nu, R, mask, lme):  # its step reads no log-mean-exp
        s = torch.sigmoid(self.log_rho + R - nu.unsqueeze(1)).masked_fill(~mask, 0.0) / self.rho  # (B, B)
        return nu - self.lr * (1.0 - s.sum(1) / mask.sum(1))

    def loss(self, R, mask, nu):
        sp = F.softplus(self.log_rho + R - nu.unsqueeze(1)).masked_fill(~mask, 0.0) / self.rho    # (B, B)
        return sp.sum(1) / mask.sum(1)


@DUALS.register("bsgd")
class BSGD(DualRule):
    uses_nu = False

    def move(self, nu, R, mask, lme):
        return nu

    def loss(self, R, mask, nu):
        return torch.logsumexp(R.masked_fill(~mask, -math.inf), 1)
