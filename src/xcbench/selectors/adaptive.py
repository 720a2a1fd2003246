"""HF-A: the hashing forest with adaptive allocation (Zhang et al. 2018, section "Adaptive Allocation").

Training is cut into phases of `phase_epochs` epochs. At the start of each phase, with p the share of
all training iterations done (0 at the start, -> 1 at the end):
    tau_cp(p) = tau_start + (tau_end - tau_start) p          (grows linearly with the iterations)
    K*        = min { K : mean_x CP_K(x) >= tau_cp(p) }     (the average top-K cumulative probability, eq. 3,
                                                              on the probe batch at the end of the last phase)
    M         = B K*                                        (the per-example quota K* for each of the B
                                                              examples; clipped to [M_min, M_max]; the
                                                              configured M before any measurement)
    T(p)      = round(T_start + (T_end - T_start) p)         (rebuild interval grows linearly)
    L(p)      = round(L_start + (L_end - L_start) p)         (number of trees grows linearly)
The forest is rebuilt with the new L at the phase start. The paper does not publish its constants
(nor does its code: HF-A was never released); the defaults here follow its ablation (tau_cp 0.7-0.9,
T 100-1000, L 5-50) and are stated in every caption that uses them.
"""

from __future__ import annotations

import logging

import torch

from xcbench.registry import SELECTORS
from xcbench.selectors.forest import HashingForest

LOG = logging.getLogger("xcbench.train")  # a phase's settings reach the run's log beside its epoch lines


def linear(a: float, b: float, p: float) -> float:
    return a + (b - a) * min(1.0, max(0.0, p))


def smallest_k_reaching(cp: torch.Tensor, tau: float) -> int:
    """min K (1-based) with cp[K - 1] >= tau; len(cp) when none reaches it.  cp (Kmax,) non-decreasing"""
    hit = torch.nonzero(cp >= tau)
    return int(hit[0, 0]) + 1 if len(hit) else len(cp)


@SELECTORS.register("hf_a")
class AdaptiveHashingForest(HashingForest):
    def __init__(self, n_classes: int, tau_start: float = 0.7, tau_end: float = 0.9, trees_start: int = 5,
                 trees_end: int = 50, T_start: int = 100, T_end: int = 1000, phase_epochs: int = 1,
                 M_min: int = 1, M_max: float = 0.1, leaf: int = 16) -> None:
        super().__init__(n_classes, trees=trees_start, leaf=leaf, rebuild_every=T_start)
        self.tau = (tau_start, tau_end)
        self.L_range, self.T_range, self.phase_epochs = (trees_start, trees_end), (T_start, T_end), phase_epochs
        self.M_min = M_min
        self.M_max = int(M_max * n_classes) if M_max <= 1 else int(M_max)
        self.register_buffer("M", torch.zeros((), dtype=torch.long))          # 0: not adapted yet
        self.register_buffer("cp", torch.zeros(0))                             # mean CP_K, K = 1..M_max
        self.register_buffer("plan", torch.tensor([trees_start, T_start]))    # (L, T) of this phase

    def observe(self, probe_logits: torch.Tensor) -> None:
        """The probe's mean CP_K for K = 1..M_max, from its full logits after every epoch."""
        m = min(self.M_max, probe_logits.shape[1])
        cp = torch.softmax(probe_logits.double(), 1).topk(m, dim=1).values.cumsum(1).mean(0)    # (m,)
        self.cp = cp.detach().float().clone()

    def start_epoch(self, epoch: int, progress: float, batch_size: int) -> bool:
        """A new phase: set its M, L, T (adapt) and ask for a rebuild."""
        if not self.is_phase_start(epoch):
            return False
        plan = self.adapt(progress, batch_size)
        LOG.info("HF-A phase from epoch %d: M = %d active classes (tau_cp %.3f), %d trees rebuilt every %d steps",
                 epoch + 1, plan["M"], plan["tau_cp"], plan["L"], plan["T"])
        return True

    def is_phase_start(self, epoch: int) -> bool:
        return epoch % self.phase_epochs == 0

    def adapt(self, p: float, batch_size: int) -> dict:
        """Set M, L, T for the phase starting at progress p; returns them."""
        L, T = round(linear(*self.L_range, p)), round(linear(*self.T_range, p))
        self.plan = torch.tensor([L, T], device=self.plan.device)
        if self.cp.numel():
            M = batch_size * smallest_k_reaching(self.cp, linear(*self.tau, p))
            self.M.fill_(min(self.M_max, max(self.M_min, M)))
        self._apply_plan()
        return {"M": int(self.M), "L": L, "T": T, "tau_cp": linear(*self.tau, p)}

    def _apply_plan(self) -> None:
        self.trees, self.rebuild_every = int(self.plan[0]), int(self.plan[1])

    def budget(self, k: int) -> int:
        return int(self.M) if int(self.M) > 0 else k

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "cp"
        if key in state_dict:
            self.cp = torch.empty_like(state_dict[key], device=self.cp.device)
        self.plan = torch.as_tensor(state_dict.get(prefix + "plan", self.plan)).clone()
        self._apply_plan()  # before the parent's rebuild: the forest of a resumed run has this phase's L
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

