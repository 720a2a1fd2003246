"""Full softmax cross-entropy over all C classes (the exact baseline of every paper).

Single-label:  l_i = -log softmax(o_i)_{y_i},  o_i = W h_i + b.
Multi-label:   l_i = -1/|y_i| sum_{l in y_i} log softmax(o_i)_l   (uniform target distribution over
               the positives; rows with no label are skipped), the usual softmax baseline in XMC: every other
               positive of the row sits in each positive's denominator (`other_positives: compete`).
  `other_positives: masked` takes them out, each positive against the row's negatives N_i alone,
               l_i = 1/|y_i| sum_{l in y_i} softplus(LSE_{c in N_i} o_ic - o_il),
  the exact loss the sampled softmax estimates on multi-label rows (one positive a step, every other positive
  masked as an accidental hit: heads/sampled_softmax.py). The two agree on rows with one label.
The bias starts at 0 (`bias_init: zero`) or at the log of the training label frequencies, add-one,
b_c = log((n_c + 1) / sum_j (n_j + 1)) (`bias_init: log_prior`): the logits then start at the unigram model,
the prior NCE's bias starts at with unigram noise (heads/nce.py, `log_noise`; studies/full_bias_start).
With `probe_ks` (e.g. [1, 10, 100, 1000]) it reports per epoch the probe batch's average CP_K and
NCG_K (Zhang et al. 2018, eqs. 3 and 5; their Figure 1 is measured during full-softmax training).
"""

from __future__ import annotations

import torch

from xcbench.heads.base import LinearHead, layer_mb, multi_hot
from xcbench.heads.selective_softmax import probe_metrics
from xcbench.registry import HEADS
from xcbench.samplers.simple import log_unigram


def softmax_ce(o: torch.Tensor, y: torch.Tensor, other_positives: str = "compete") -> torch.Tensor:
    """Mean softmax cross-entropy of logits o (B, C): single-label y (B,), or padded multi-label
    y (B, Lmax) with a uniform target over each row's positives (rows without labels skipped); with
    `other_positives="masked"` each positive against the row's negatives alone (module docstring)."""
    if y.dim() == 1:
        return -torch.log_softmax(o, 1).gather(1, y.unsqueeze(1)).mean()
    mask = y >= 0                                                                   # (B, Lmax)
    if other_positives == "masked":
        is_pos = multi_hot(y, o.shape[1], torch.bool)                                # (B, C)
        lse_neg = torch.logsumexp(o.masked_fill(is_pos, -torch.inf), 1, keepdim=True)    # (B, 1)
        per = (torch.nn.functional.softplus(lse_neg - o.gather(1, y.clamp(min=0))) * mask).sum(1)   # (B,)
    else:
        per = -(torch.log_softmax(o, 1).gather(1, y.clamp(min=0)) * mask).sum(1)    # (B,)
    n = mask.sum(1)
    keep = n > 0
    return (per[keep] / n[keep]).mean()


@HEADS.register("full_softmax")
class FullSoftmax(LinearHead):
    resumes_mid_epoch = True  # no index, no hook: a long epoch may checkpoint inside
    graph_safe = True

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, init_std: float | None = None,
                 probe_ks: list[int] | None = None, bias_init: str = "zero", other_positives: str = "compete") -> None:
        super().__init__(in_dim, n_classes, gen, init_std)
        if bias_init not in ("zero", "log_prior"):
            raise ValueError(f"full softmax: bias_init must be 'zero' or 'log_prior', got {bias_init!r}")
        if other_positives not in ("compete", "masked"):
            raise ValueError(f"full softmax: other_positives must be 'compete' or 'masked', got {other_positives!r}")
        self.probe_ks, self.bias_init, self.other_positives = list(probe_ks or []), bias_init, other_positives

    def setup(self, stats):
        if self.bias_init == "log_prior":  # before a checkpoint's weights are loaded over it (train.py)
            with torch.no_grad():
                self.b.copy_(log_unigram(stats["label_counts"]).to(self.b))                 # (C,)

    def loss(self, h, y, idx, gen):
        return softmax_ce(self.scores(h), y, self.other_positives)

    @torch.no_grad()
    def epoch_metrics(self, h, y):
        return probe_metrics(self.scores(h), y, self.probe_ks) if self.probe_ks and y.dim() == 1 else {}

    def report(self):
        return {"active_rows": float(self.n_classes), "softmax_layer_mb": layer_mb(self.n_classes, self.in_dim)}
