"""Sampled softmax: the target against m negatives drawn from a proposal q, log-q corrected (Bengio & Senecal 2008;
Rawat et al. 2019, RF-softmax equations 1-6), on the logits of `normalized_softmax` (heads/normalized_softmax.py:
o_c = tau h . e_c, optionally normalised or absolute).

`sampled_softmax`: for target t and m negatives s_1..s_m drawn i.i.d. with replacement from q(. | h),
    o'_t   = o_t                                   (correct: negatives, RF-softmax eq. 5)
    o'_t   = o_t - log(m q(t | h))                 (correct: both, the MIDX reference code's loss_func.py)
    o'_s_j = o_s_j - log(m q(s_j | h))             (log-q correction of every negative)
    o'_s_j = -inf  where s_j == t                  (accidental hits masked; `hits: keep` leaves them, as the MIDX code)
    loss   = -log softmax([o'_t, o'_s_1 .. o'_s_m])_0
With `both` the log m cancels, and a uniform q gives plain negative sampling: -log softmax([o_t, o_s])_0.
When q is far from the softmax, `negatives` lifts each drawn word by -log(m q), so with a uniform q (or a MIDX index
built from untrained embeddings) the rare words, most of the draws, are pushed down about n/m times harder than their
share: on PTB's LSTM (m = 100) Uniform ends epoch 5 at validation perplexity 2,869 under `negatives` and 222 under
`both`, while Unigram, whose q is near the word frequencies, is 1.6% better under `negatives`
(studies/lm_logq_convention).
With the exact proposal q = softmax(o) every corrected logit equals log Z, and the expected gradient in o is the
full softmax's p - e_t times a weight w(p_t) of the example alone (its direction is exact); with k ~ Bin(m, 1 - p_t)
the draws that are not the target:
    correct  hits   w(p_t)                                  range over p_t in [0, 1)
    both     keep   m / (m + 1)                             the same for every example (the MIDX code's loss)
    both     mask   E[k / (1 + k)] / (1 - p_t)              m/(m+1) rising to m/2: confident targets weigh up to (m+1)/2x more
    negatives keep  1 / (1 + p_t)                           1 falling to 1/2: frequent targets count less
    negatives mask  E[k / (m p_t + k)] / (1 - p_t)          within a few percent of 1 (TensorFlow's default pair)
So each convention has its hit rule: `both` keeps the hits and `negatives` masks them (the default stays `mask` for
either: a run's spec names the rule it trained with). With a proposal far from the
softmax (uniform, unigram) q(t | h) is small, hits are rare and the rules agree (tests/test_samplers.py checks all four
by Monte Carlo; studies/accidental_hits). A positive the
proposal cannot draw (q(t | h) = 0: LSH) is corrected as if q(t | h) = 1/n.
Multi-label rows (XMC) are reduced to one uniformly drawn positive per row and step, and a draw
of any of the row's positives counts as an accidental hit. With q = softmax(o) (the `exact` sampler) the expected
gradient tends to the full-softmax gradient
as m grows (tests/test_samplers.py). Class rows are read with `F.embedding(sparse=True)`, so the
gradient of E is a sparse row tensor touching only the rows used in the batch: a step costs
O(B m d), not O(n d) (optimizers `lazy_adam`, `row_sgd`, `sgd` accept it). After each step the
sampler's index is refreshed for exactly those rows, and with a tied input table for every row the
gradient of E reaches (the input tokens' too; `update_rows`, O(D log n) per row for trees),
and rebuilt from all rows at every epoch start.
`logits: all` computes the same logits as one (B, d) x (d, n) product over every class, picking each row's
1 + m: B n d multiply-adds against the gather's B m d, but one GEMM instead of moving B m rows of d floats four
times (gather, dots, two backward products) and coalescing their gradient. It pays once B m is
about 4-8 times n (benchmarks/out/sampled_logits.md, one step alone): MIDX Table 9 at AmazonCat-13K gathers 256K
rows of 13,330 classes a step (benchmarks/out/train_step_midx_table9_*).
`logits: sparse` computes the B (1 + m) dots as a sampled product over the sparse (B, n) pattern of the draws and
both gradients as sparse-dense products: the gather's B m d multiply-adds without its (B, m, d) rows
(heads/row_dots.py): 1.8x less time than the gather for the output layer's step at PTB's B = 700, m = 100,
d = 200, about the gather's where B m is at most 4 n (benchmarks/out/sampled_logits*.md).
The logits and gradients of both agree with the gather's to rounding (they sum in another order), and with
`sparse_grad` E's gradient is handed on as the same sparse rows (the batch's classes, hits included), so a lazy
optimizer moves the same rows. The default stays `gather`. log q is a constant (detached); a trainable
proposal takes its own step at every training step (`fit_step(h, E)`, E the raw class table, which
the proposal may normalise; samplers/base.py), apart from the model's loss and optimizer, and both
losses are logged (`loss_parts`: main, aux).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from xcbench.heads.base import check_param
from xcbench.heads.normalized_softmax import NormalizedSoftmax
from xcbench.heads.row_dots import RowDots, SampledDots, SparseRows
from xcbench.registry import HEADS, SAMPLERS
from xcbench.samplers.base import Sampler, proposal_kl
from xcbench.samplers.frequency import RANKS, cumulative_curves, ranks
from xcbench.seed import rand

FREQ_DRAWS = 50  # draws per probe query for the sampling-frequency curves


CORRECTIONS = ("negatives", "both")
LOGITS = ("gather", "all", "sparse")  # how the 1 + m logits of a row are computed (heads/row_dots.py)
HITS = ("mask", "keep")  # a drawn target: out of the row's negatives (-inf), or left in as one of them


def sampled_softmax_loss(o_t: torch.Tensor, o_s: torch.Tensor, log_q: torch.Tensor, hits: torch.Tensor,
                         m: int, log_q_t: torch.Tensor | None = None) -> torch.Tensor:
    """Per-example loss (B,) from o_t (B,), negatives' logits o_s (B, m), their log q and hit mask;
    with the positive's log q (B,) the positive is corrected too (`correct: both`)."""
    adj = (o_s - log_q.detach() - math.log(m)).masked_fill(hits, -math.inf)              # (B, m)
    if log_q_t is not None:
        o_t = o_t - log_q_t.detach() - math.log(m)                                       # (B,)
    logits = torch.cat([o_t.unsqueeze(1), adj], 1)                                       # (B, 1 + m)
    return -torch.log_softmax(logits, 1)[:, 0]


def pick_one_positive(y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-label to multi-class reduction (RF-softmax footnote 1): for padded y (B, Lmax), the rows
    with a label and one of their positives drawn uniformly: (rows (B',), targets (B',))."""
    n = (y >= 0).sum(1)                                                                  # (B,)
    rows = (n > 0).nonzero().squeeze(1)
    r = (rand(len(rows), gen, y.device) * n[rows]).long()
    return rows, y[rows, r]


def grad_rows(g: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Rows of a class table that the step's gradient `g` (dense or sparse, or None) reaches: beyond the
    head's own rows, the input-token rows of a tied table (model.tie_embeddings). A plain or
    row-wise optimizer moves exactly these rows; a momentum optimizer (dense Adam) moves others too,
    which the index sees at the next epoch start."""
    if g is None:
        return torch.zeros(0, dtype=torch.long, device=device)
    if g.is_sparse:
        return g.coalesce().indices()[0]
    return g.ne(0).any(1).nonzero().squeeze(1)


@HEADS.register("sampled_softmax")
class SampledSoftmax(NormalizedSoftmax):
    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, sampler: str = "uniform",
                 sampler_params: dict | None = None, m: int = 100, tau: float = 1.0, normalize: bool = False,
                 absolute: bool = False, sparse_grad: bool = False, init_std: float = 0.01,
                 correct: str = "negatives", logits: str = "gather", hits: str = "mask") -> None:
        super().__init__(in_dim, n_classes, gen, tau, normalize, absolute, init_std)
        check_param("sampled_softmax", "m", m, 1)
        if correct not in CORRECTIONS:
            raise ValueError(f"sampled_softmax: correct must be one of {CORRECTIONS}, got {correct!r}")
        if logits not in LOGITS:
            raise ValueError(f"sampled_softmax: logits must be one of {LOGITS}, got {logits!r}")
        if hits not in HITS:
            raise ValueError(f"sampled_softmax: hits must be one of {HITS}, got {hits!r}")
        self.sampler = SAMPLERS.get(sampler)(n_classes, **(sampler_params or {}))
        self.sampler.draws = m
        self.m, self.sparse_grad, self.correct, self.logits, self.hits = m, sparse_grad, correct, logits, hits
        self._touched: torch.Tensor | None = None
        self._built = False  # the proposal's index exists (after the first epoch start)
        # cumulative curves (samplers/frequency.py) after the first and the latest epoch: [stage, softmax|sampler, rank]
        self.register_buffer("cdf", torch.zeros(2, 2, RANKS))
        self.register_buffer("cdf_calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("order", torch.arange(n_classes))  # classes by decreasing training frequency

    @property
    def graph_safe(self) -> bool:
        """Capturable (graphs.py) unless a step calls torch.unique (the sampler refreshes rows after each step,
        `logits: all` hands on sparse rows, or `logits: sparse`) or the sampler trains."""
        return (not self.sampler.updates_rows and type(self.sampler).fit_step is Sampler.fit_step
                and not (self.logits == "all" and self.sparse_grad) and self.logits != "sparse")

    def setup(self, stats: dict) -> None:
        self.sampler.setup(stats["label_counts"])
        self.order = torch.argsort(stats["label_counts"].to(self.order.device), descending=True, stable=True)

    def on_epoch_start(self, step: int, gen: torch.Generator) -> None:
        self.sampler.update(self._unit(self.E.detach()), gen)
        self._built = True

    def after_step(self, step: int, optimizer) -> None:
        if self._touched is not None:
            ids = self._touched
            if self.tied:  # the input tokens' rows moved too
                ids = torch.unique(torch.cat([ids, grad_rows(self.E.grad, ids.device)]))
            self.sampler.update_rows(ids, self.E.detach()[ids])
            self._touched = None

    @torch.no_grad()
    def epoch_metrics(self, h, y):
        """kl_proposal: mean over the probe queries of KL(softmax(o) || q(. | h)), the proposal's
        distance from the softmax it stands for (MIDX Table 5's KL loss; the same estimator for every
        sampler), exact over all n classes; omitted where q is 0 on a class (LSH). cdf_gap: the largest
        gap between the softmax's and the draws' cumulative curves over classes by frequency
        (samplers/frequency.py), whose curves `report` returns (MIDX Figure 5)."""
        if y.dim() != 1 or (self.sampler.needs_index and not self._built):
            return {}
        h = self._unit(h)
        kl, p_sum = proposal_kl(self.sampler, h, self.scores)                                # (B,), (n,)
        v = kl.mean().item()
        g = torch.Generator().manual_seed(0)
        ids, _ = self.sampler.sample(h, FREQ_DRAWS, g)                                       # (B, S)
        curves = cumulative_curves(p_sum / len(h), ids, self.order)                          # (2, R)
        self.cdf[1] = curves
        if self.cdf_calls == 0:
            self.cdf[0] = curves
        self.cdf_calls += 1
        out = {"cdf_gap": (curves[0] - curves[1]).abs().max().item()}
        return {**out, "kl_proposal": v} if math.isfinite(v) else out

    def report(self) -> dict:
        """The cumulative curves after the first and the last epoch (MIDX Figure 5)."""
        if self.cdf_calls == 0:
            return {}
        r = ranks(self.n_classes).tolist()
        c = self.cdf[:, :, : len(r)].tolist()
        return {"cdf": {"ranks": r, "first": {"softmax": c[0][0], "sampler": c[0][1]},
                        "last": {"softmax": c[1][0], "sampler": c[1][1]}}}

    @property
    def _dots(self) -> dict:
        """The `logits` routes: h (B, d) against class rows `ids` (B, k) -> (B, k), divided by the rows' norms when
        normalising, without normalised copies of the rows (heads/row_dots.py)."""
        return {"gather": self._cos, "all": self._cos_all, "sparse": self._cos_sparse}

    def _cos(self, h: torch.Tensor, ids: torch.Tensor, touched: torch.Tensor | None = None) -> torch.Tensor:
        """One gather of the rows (B, k, d) (the step's cost is its passes over them)."""
        E_s = F.embedding(ids, self.E, sparse=self.sparse_grad)                               # (B, k, d)
        dots = RowDots.apply(h.unsqueeze(1), E_s)                                             # (B, k)
        return dots / E_s.norm(dim=-1).clamp(min=1e-12) if self.normalize else dots

    def _cos_sparse(self, h: torch.Tensor, ids: torch.Tensor, touched: torch.Tensor | None = None) -> torch.Tensor:
        """The same dots from the sparse (B, n) pattern of the ids, no (B, k, d) rows."""
        dots = SampledDots.apply(h, self.E, ids, self.sparse_grad)                            # (B, k)
        if not self.normalize:
            return dots
        drawn, at = torch.unique(ids, return_inverse=True)                                   # (U,), (B, k)
        return dots / F.embedding(drawn, self.E, sparse=self.sparse_grad).norm(dim=1).clamp(min=1e-12)[at]

    def _cos_all(self, h: torch.Tensor, ids: torch.Tensor, touched: torch.Tensor | None) -> torch.Tensor:
        """What `_cos` returns, from one product of h (B, d) with every class row (`logits: all`)."""
        E = SparseRows.apply(self.E, touched) if self.sparse_grad else self.E                # (n, d)
        dots = (h @ E.T).gather(1, ids)                                                      # (B, k)
        return dots / E.norm(dim=1).clamp(min=1e-12)[ids] if self.normalize else dots

    def loss(self, h, y, idx, gen):
        positives = None
        if y.dim() == 2:  # multi-label: one positive per row per step; every positive counts as a hit
            rows, t = pick_one_positive(y, gen)
            h, positives, y = h[rows], y[rows], t
        h = self._unit(h)                                                                     # (B, d)
        if self.sampler.update_every_step:
            self.sampler.update(self._unit(self.E.detach()), gen)
        log_q_t = None
        if self.correct == "both":  # the targets' log q too, from the same scores where the sampler has them
            ids, log_q, log_q_t = self.sampler.sample_with(h, self.m, gen, y.unsqueeze(1))    # (B, m), (B, m), (B, 1)
            log_q_t = log_q_t.squeeze(1)
            log_q_t = log_q_t.where(torch.isfinite(log_q_t), torch.full_like(log_q_t, -math.log(self.n_classes)))
        else:
            ids, log_q = self.sampler.sample(h, self.m, gen)                                  # (B, m)
        all_ids = torch.cat([y.unsqueeze(1), ids], 1)                                        # (B, 1 + m)
        refresh = self.sampler.updates_rows and not self.sampler.update_every_step
        touched = None
        if refresh or (self.logits == "all" and self.sparse_grad):  # torch.unique waits for the GPU
            touched = torch.unique(all_ids)
        if refresh:
            self._touched = touched
        o = self._logit(self._dots[self.logits](h, all_ids, touched))                          # (B, 1 + m)
        o_t, o_s = o[:, 0], o[:, 1:]
        if self.hits == "keep":
            hits = torch.zeros_like(ids, dtype=torch.bool)                                      # (B, m)
        elif positives is None:
            hits = ids == y.unsqueeze(1)                                                         # (B, m)
        else:
            hits = (ids.unsqueeze(2) == positives.unsqueeze(1)).any(2)                          # (B, m)
        main = sampled_softmax_loss(o_t, o_s, log_q, hits, self.m, log_q_t).mean()
        aux = self.sampler.fit_step(h, self.E)  # the raw table: no O(n d) normalised copy per step
        if aux is not None:
            self.loss_parts = {"main": main.item(), "aux": aux}
        return main
