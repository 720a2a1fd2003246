"""Selective softmax over a dynamically selected active set (Zhang et al. 2018, eq. 6 and
"Implementation Details").

Per batch X: the active set S(X) is the union of the examples' selections (the selector's; the
labels always in it). Above the maximum size M it is cut to M by keeping the labels and sampling the
rest without replacement in proportion to their renormalised probabilities on S, averaged over the
batch, p_c = 1/B sum_i softmax_S(W_S h_i)_c (Gumbel top-k with the loss generator). Then
    loss = 1/B sum_i -log softmax(W_S h_i)_{pos(y_i)}          (logits of the active classes only)
with W_S the rows of S read by `F.embedding(sparse=True)`: the gradient touches only those rows, so
a step costs O(B |S| d) and the optimizer (`lazy_adam`, `row_sgd`) writes only them. With S = all
classes the loss and its gradient equal the full softmax's (tests/test_selective.py).

Structure-based selectors are rebuilt from the current W every T = `selector.rebuild_every` steps
(None: built once, before the first step); the step counter is a buffer, so resume is exact.
M = `M` classes, or `M_frac` of them (the paper's 1%); HF-A (`hf_a`) adapts M, L and T by phases.

Per-epoch metrics on the fixed probe batch (history, figures 1 and 3): average CP_K and NCG_K
(metrics.py, eqs. 3 and 5) for K in `probe_ks`; `precision`, the approximation precision: the probe
is cut into training-size batches (the rows of a training step), each selected as in training, and precision = mean over examples
of |S ∩ T_q(x)| / q, T_q(x) the exact top-q classes of W x and q = ceil(M / B) the per-example quota;
`select_ms`, the mean selection time per training step (rebuilds included) and `active`, the mean |S|.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from xcbench.heads.base import Head, check_param, class_weights, layer_mb
from xcbench.metrics import cp_at_k, ncg_at_k
from xcbench.registry import HEADS, SELECTORS


def probe_metrics(o: torch.Tensor, y: torch.Tensor, ks: list[int]) -> dict[str, float]:
    """CP_K and NCG_K of probe logits o (P, C) for the K in ks below C."""
    ks = [k for k in ks if k < o.shape[1]]
    if not ks:
        return {}
    cp, ncg = cp_at_k(o, ks), ncg_at_k(o, y, ks)
    return {**{f"cp_{k}": v for k, v in zip(ks, cp)}, **{f"ncg_{k}": v for k, v in zip(ks, ncg)}}


@HEADS.register("selective_softmax")
class SelectiveSoftmax(Head):
    multi_label = False
    resumes_mid_epoch = True  # the selector's structure, HF-A's phase and the tallies are buffers

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, selector: str = "hf",
                 selector_params: dict | None = None, M: int | None = None, M_frac: float = 0.01,
                 init_std: float | None = None, probe_ks: list[int] = (1, 10, 100, 1000)) -> None:
        super().__init__(in_dim, n_classes, gen)
        check_param("selective_softmax", "M_frac", M_frac, 0, 1, open_lo=True)
        if M is not None:
            check_param("selective_softmax", "M", M, 1)
        self.W = class_weights(n_classes, in_dim, gen, init_std)                               # (C, d)
        self.selector = SELECTORS.get(selector)(n_classes, **(selector_params or {}))
        self.selector.bind(self.W)
        self.k = int(M) if M else max(1, round(M_frac * n_classes))
        self.probe_ks = list(probe_ks)
        self.register_buffer("since_build", torch.zeros((), dtype=torch.long))
        # steps and active rows summed over this epoch and over the run (epoch_metrics, report): a buffer, so a run
        # resumed inside an epoch or after one reports what the uninterrupted run does
        self.register_buffer("tally", torch.zeros(4, dtype=torch.float64))    # steps, active, steps_all, active_all
        self.batch_size, self.total_steps, self.steps_per_epoch, self._rows = 1, 1, 1, 0
        self._sel_s = 0.0

    def class_embeddings(self):
        return self.W

    def setup(self, stats):
        self.batch_size = stats.get("batch_size", 1)
        self.steps_per_epoch = max(1, stats.get("steps_per_epoch", 1))
        self.total_steps = max(1, stats.get("epochs", 1) * self.steps_per_epoch)

    def scores(self, h):
        return h @ self.W.T

    def _rebuild(self, gen: torch.Generator) -> None:
        self.selector.update(self.W.detach(), gen)
        self.since_build.zero_()

    def on_epoch_start(self, step, gen):
        sel = self.selector
        fresh = sel.start_epoch(step // self.steps_per_epoch, step / self.total_steps, self.batch_size)
        if sel.needs_index and (fresh or not sel.built):
            self._rebuild(gen)

    def cap(self, h: torch.Tensor, y: torch.Tensor, S: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
        """S cut to k classes: the labels, plus k - |labels| others drawn without replacement with
        probability proportional to the batch-mean renormalised softmax on S (Gumbel top-k)."""
        lab = torch.unique(y)
        need = k - len(lab)
        if need <= 0:
            return lab
        rest = S[~torch.isin(S, lab)]
        with torch.no_grad():
            logp = torch.log_softmax(h @ self.W[rest].T, 1).exp().mean(0).clamp(min=1e-30).log()    # (|rest|,)
        u = torch.rand(len(rest), generator=gen, device=gen.device).to(h.device).clamp(1e-12, 1 - 1e-12)
        pick = (logp - torch.log(-torch.log(u))).topk(need).indices
        return torch.sort(torch.cat([lab, rest[pick]])).values

    def active_set(self, h: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """The batch's (capped) active set: sorted class ids containing every label."""
        k = self.selector.budget(self.k)
        S = self.selector.select(h.detach(), y, k, gen)
        return self.cap(h.detach(), y, S, k, gen) if len(S) > k else S

    def loss(self, h, y, idx, gen):
        t0 = time.perf_counter()
        T = self.selector.rebuild_every if self.selector.needs_index else None
        if T and int(self.since_build) >= T:
            self._rebuild(gen)
        S = self.active_set(h, y, gen)                                                         # (M',)
        self._sel_s += time.perf_counter() - t0
        self._rows = len(h)  # queries per step (a language model's batch x bptt)
        self.tally[0] += 1
        self.tally[1] += len(S)
        self.since_build += 1
        o = h @ F.embedding(S, self.W, sparse=True).T                                          # (B, M')
        return F.cross_entropy(o, torch.searchsorted(S, y))

    @torch.no_grad()
    def precision(self, h: torch.Tensor, y: torch.Tensor, o: torch.Tensor) -> float:
        g = torch.Generator().manual_seed(0)
        B, k = self._rows or self.batch_size, self.selector.budget(self.k)
        q = max(1, math.ceil(k / B))
        hit = []
        for s in range(0, len(h) - B + 1, B):
            S = self.active_set(h[s:s + B], y[s:s + B], g)
            top = o[s:s + B].topk(min(q, self.n_classes), dim=1).indices                       # (B, q)
            hit.append(torch.isin(top, S).double().mean(1))
        return torch.cat(hit).mean().item() if hit else float("nan")

    @torch.no_grad()
    def epoch_metrics(self, h, y):
        o = self.scores(h)                                                                     # (P, C)
        out = probe_metrics(o, y, self.probe_ks)
        self.selector.observe(o)
        out["precision"] = self.precision(h, y, o)
        out["M"] = float(self.selector.budget(self.k))
        steps, active = self.tally[:2].tolist()
        if steps:
            out.update(select_ms=1000 * self._sel_s / steps, active=active / steps)
            self.tally[2:] += self.tally[:2]
        self._sel_s = 0.0
        self.tally[:2] = 0.0
        return out

    def report(self):
        steps, active = self.tally[2:].tolist()
        rows = active / steps if steps else float(self.k)
        return {"active_rows": rows, "softmax_layer_mb": layer_mb(rows, self.in_dim)}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        state_dict.setdefault(prefix + "tally", torch.zeros(4, dtype=torch.float64))  # checkpoints from before it
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
