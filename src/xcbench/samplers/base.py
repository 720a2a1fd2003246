"""Proposal distributions q(c | h) for sampled softmax (interface; samplers come with their issues).

Convention shared by every sampler and the sampled-softmax head:
- m negatives are drawn i.i.d. *with replacement* from q(. | h);
- `log_prob` is the exact, normalised log q of this proposal (tests compare it with brute force);
- the head adjusts logits o'_s = o_s - log(m q(s | h)) and masks accidental hits (s == target); with
  `correct: both` (the MIDX experiments, as the public MIDX code) it adjusts the target's logit the
  same way, o'_t = o_t - log(m q(t | h)), so the targets' log q is asked for beside the draws
  (`sample_with`: `sample`, then `log_prob`, unless a sampler has both from one scoring);
- `log_q` is a constant to the head: it is detached there, so no gradient of the sampled-softmax
  loss reaches a proposal's parameters (or h, or the class embeddings) through log q;
- a trainable proposal (learnable MIDX codebooks) takes one step on its own loss in `fit_step(h,
  class_emb)` at every training step, with its own optimizer (class_emb: the head's raw class table,
  un-normalised; keep the step sublinear in n), and returns the loss for the log (loss_parts["aux"]).
  Its parameters are not the model's: the model's optimizer, learning-rate schedule and gradient
  clipping never see them (sharing SGD lr 20 and a global norm clip of 0.25 with the language model,
  the codewords' gradient took the clip's budget and the model stalled: validation perplexity 504
  after 9 epochs where k-means codebooks had 167);
- `update(class_emb, gen)` rebuilds the index with an explicit generator (k-means seeds). Index
  state lives in buffers or is rebuilt deterministically at every epoch start, so a resumed run
  gives the same draws as an uninterrupted one.

`proposal_kl` measures how far a proposal is from the softmax it stands for, exact over all n classes:
    KL_b = sum_c p(c | h_b) (log p(c | h_b) - log q(c | h_b)),   p = softmax(o(h_b))
(MIDX Table 5's KL; the sampled head logs its mean as `kl_proposal`).
"""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def proposal_kl(sampler, h: torch.Tensor, scores, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(softmax(scores(h_b)) || q(. | h_b)) for every query row b (float64, exact over all n classes), and the
    sum of the softmax rows (the mean predicted mass per class times B). `scores`: (b, d) -> (b, n) logits."""
    kl, p_sum = [], None
    for s in range(0, len(h), chunk):
        hb = h[s:s + chunk]                                                                   # (b, d)
        logp = torch.log_softmax(scores(hb).double(), 1)                                      # (b, n)
        n = logp.shape[1]
        logq = sampler.log_prob(hb, torch.arange(n, device=h.device).expand(len(hb), n)).double()  # (b, n)
        p = logp.exp()                                                                        # (b, n)
        kl.append((p * (logp - logq)).sum(1))
        p_sum = p.sum(0) if p_sum is None else p_sum + p.sum(0)                               # (n,)
    return torch.cat(kl), p_sum


class Sampler(nn.Module):
    needs_index = False        # True: `update(class_emb)` must run before sampling (at each epoch start)
    update_every_step = False  # True: cheap enough to refresh from the current embeddings every step
    draws: int | None = None   # draws per query, set by the head: a sampler may pick its method by cost

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = n_classes

    def setup(self, label_counts: torch.Tensor) -> None:
        """Training-label frequencies before training (unigram proposals); default no-op."""

    def update(self, class_emb: torch.Tensor, gen: torch.Generator | None) -> None:
        """Rebuild the index from the current class embeddings (k-means, tree, hash); default no-op."""

    @property
    def updates_rows(self) -> bool:
        """Whether `update_rows` refreshes the index after each step: a sampler that overrides it (kernel trees)."""
        return type(self).update_rows is not Sampler.update_rows

    def update_rows(self, ids: torch.Tensor, new_emb: torch.Tensor) -> None:
        """Refresh the index for the changed classes `ids` (distinct) after an optimizer step; default no-op."""

    def sample(self, h: torch.Tensor, m: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, m) long and their log q (B, m)."""
        raise NotImplementedError

    def log_prob(self, h: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Exact log q(ids | h), same shape as ids."""
        raise NotImplementedError

    def sample_with(self, h: torch.Tensor, m: int, gen: torch.Generator, targets: torch.Tensor) -> tuple:
        """`sample(h, m, gen)` and `log_prob(h, targets)` (no gradient) in one call: ids (B, m), their log q and
        the targets' log q, for the head's `correct: both`. A sampler whose two would score the same (B, n) matrix
        overrides it to score once (samplers/simple.py's exact ones); the draws and numbers are the same."""
        ids, log_q = self.sample(h, m, gen)
        with torch.no_grad():
            return ids, log_q, self.log_prob(h, targets)

    def index_gib(self, n: int, d: int) -> float:
        """Memory of the index over n classes of width d, in GiB (a caller may skip a run too large for
        the machine); default 0: no index worth counting."""
        return 0.0

    def fit_step(self, h: torch.Tensor, class_emb: torch.Tensor) -> float | None:
        """One update of a trainable proposal on its own loss; that loss, or None: nothing to train."""
        return None
