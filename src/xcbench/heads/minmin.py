"""Min-min cross-entropy with per-example duals and in-batch negatives (SCENT family).

Book: T. Yang, Compositional Optimization for Advanced ML, section 6.3, Algorithm 26.
For a batch of B examples with labels y (the multiset Y_t), features h and class weights W (K, d):
    Q   = H W[Y_t]^T                       (B, B): every example against every in-batch label
    R_ij = Q_ij - w_{y_i}.h_i,  j != i     (the B - 1 other positions: a multiset of negatives;
                                            positions sharing y_i give R = 0, like j = y_i in the sum)
    nu_i <- rule.update(nu_i, R_i)         (closed form / step of the chosen DUALS rule; at an
                                            example's first visit nu_i = logmeanexp_j R_ij instead,
                                            as the reference code does: `nu_init: first_visit`)
    loss = (1/B) sum_i rule.loss(R_i, nu_i)  (nu after or before the update: rule.loss_at_updated)
The rule's per-epoch schedules (SOX's gamma, the SGD rules' step) advance in `on_epoch_start`, over the
run's epochs or `schedule_epochs` (the paper's length: a shorter run follows its first epochs).
`loss_parts["nu_gap"]` (history: train_loss_nu_gap) is the batch mean of logmeanexp_j R_ij - nu_i for
the nu the loss reads: the log of the total weight the W-gradient gives the negatives (0 = normalised
like a softmax; large = an un-normalised exponential loss, whose steps grow as e^gap); nu_gap_max is
the batch's largest.
W[Y_t] is read through `F.embedding(..., sparse=True)`, so the gradient of W is a sparse tensor
holding only the rows of C_t (the unique batch labels); `row_sgd` then updates those rows and
their momentum only. nu is a float64 buffer indexed by example id, checkpointed with the model.
Evaluation uses the full scores h W^T. Per epoch the head reports `inbatch_mass`: on the probe
batch cut into training-size batches, the share of each example's full-softmax mass over wrong
classes that falls on its batch's labels (near 1: in-batch negatives represent the full softmax well;
(B-1)/(K-1) at uniform scores).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xcbench.heads.base import Head, class_weights
from xcbench.optim.duals import DUALS, logmeanexp
from xcbench.registry import HEADS


@HEADS.register("minmin_ce")
class MinMinCE(Head):
    multi_label = False

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, dual: str = "scent",
                 dual_params: dict | None = None, init_std: float = 0.01, nu_init: str = "first_visit",
                 schedule_epochs: int | None = None) -> None:
        super().__init__(in_dim, n_classes, gen)
        if nu_init not in ("first_visit", "zero"):
            raise ValueError(f"minmin_ce: nu_init must be 'first_visit' or 'zero', got {nu_init!r}")
        self.rule = DUALS.get(dual)(**(dual_params or {}))
        self.first_visit = nu_init == "first_visit"
        self.W = class_weights(n_classes, in_dim, gen, init_std)                               # (K, d)
        self.register_buffer("nu", torch.zeros(0, dtype=torch.float64))
        self.register_buffer("seen", torch.zeros(0, dtype=torch.bool))
        self.epochs, self.steps_per_epoch, self.batch_size = 1, 1, 2
        self.schedule_epochs = schedule_epochs  # the dual schedules' length (default: the run's epochs)

    def class_embeddings(self) -> nn.Parameter:
        return self.W

    def setup(self, stats: dict) -> None:
        if self.nu.numel() != stats["n_train"]:
            self.nu = torch.zeros(stats["n_train"], dtype=torch.float64, device=self.W.device)
            self.seen = torch.zeros(stats["n_train"], dtype=torch.bool, device=self.W.device)
        self.epochs = int(self.schedule_epochs or stats.get("epochs", 1))
        self.steps_per_epoch = max(1, int(stats.get("steps_per_epoch", 1)))
        self.batch_size = int(stats.get("batch_size", 2))

    def on_epoch_start(self, step: int, gen: torch.Generator) -> None:
        self.rule.set_progress(step // self.steps_per_epoch + 1, self.epochs)

    def shifted_logits(self, h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Wy = F.embedding(y, self.W, sparse=True)                                               # (B, d)
        Q = h @ Wy.T                                                                           # (B, B)
        R = (Q - (h * Wy).sum(1, keepdim=True)).double()                                       # (B, B)
        mask = ~torch.eye(len(y), dtype=torch.bool, device=y.device)                           # j != i
        return R, mask

    def loss(self, h, y, idx, gen):
        R, mask = self.shifted_logits(h, y)
        nu = None
        if self.rule.uses_nu:
            with torch.no_grad():
                old = self.nu[idx]                                                             # (B,)
                lme = logmeanexp(R.detach(), mask)                                             # (B,)
                new = self.rule.update(old, R.detach(), mask, lme)
                if self.first_visit:
                    first = ~self.seen[idx]
                    new, old = torch.where(first, lme, new), torch.where(first, lme, old)
                    self.seen[idx] = True
                self.nu[idx] = new
                nu = new if self.rule.loss_at_updated else old
                # how far the nu read by the loss lags the batch's own estimate: 0 for a fresh nu; the
                # W-loss weights exp(R_ij - nu_i)/(B-1) then sum to e^gap instead of 1
                gap = lme - nu                                                                 # (B,)
                self.loss_parts = {"nu_gap": gap.mean().item(), "nu_gap_max": gap.max().item()}
        return self.rule.loss(R, mask, nu).mean().float()

    @torch.no_grad()
    def epoch_metrics(self, h, y):
        B = min(self.batch_size, len(y))
        shares = []
        for s in range(0, len(y) - B + 1, B):
            yb = y[s:s + B]
            labels = torch.unique(yb)                                # each distinct batch label once
            for r in range(s, s + B, 64):  # 64 rows at a time: (64, K) scores, never (B, K) at K = 360K
                p = torch.softmax(self.scores(h[r:min(r + 64, s + B)]).double(), 1)           # (b, K)
                p_own = p.gather(1, yb[r - s:r - s + len(p)].unsqueeze(1)).squeeze(1)             # (b,)
                neg = p[:, labels].sum(1) - p_own                    # own label excluded
                shares.append(neg / (1.0 - p_own).clamp(min=1e-300))
        return {"inbatch_mass": torch.cat(shares).mean().item()} if shares else {}

    def scores(self, h):
        return h @ self.W.T                                                                    # (B, K)
