"""Query-independent and exact proposals for sampled softmax.

  uniform:  q(c | h) = 1 / n
  unigram:  q(c | h) = (N_c + 1) / sum_c' (N_c' + 1)   (training-label frequencies, add-one smoothed
            so that every class can be drawn and log q is finite)
  exact:    q(c | h) = softmax(tau h . e_c)            (the full softmax, the RF-softmax paper's EXP;
            O(n d) per query, the reference every cheaper proposal is compared with)
  quadratic_exact: q(c | h) ∝ alpha (h^.c^)^2 + 1      (the `quadratic` kernel proposal, brute force)
All draw m classes i.i.d. with replacement from an explicit generator. The exact two score `chunk` queries at a
time when it is set (chunk x n floats instead of B x n: MIDX Table 7's Sphere at Gowalla scores 67K queries a batch
against 122K items, 33 GB at once); the same distribution and `log_prob`, and on the CPU the same draws (torch's
multinomial draws row after row from the generator: tests/test_samplers.py).
"""

from __future__ import annotations

import math

import torch

from xcbench.registry import SAMPLERS
from xcbench.samplers.base import Sampler
from xcbench.seed import multinomial, randint


@SAMPLERS.register("uniform")
class Uniform(Sampler):
    def sample(self, h, m, gen):
        ids = randint(self.n_classes, (h.shape[0], m), gen, h.device)                                 # (B, m)
        return ids, self.log_prob(h, ids)

    def log_prob(self, h, ids):
        return torch.full(ids.shape, -math.log(self.n_classes), device=ids.device)


def log_unigram(label_counts: torch.Tensor) -> torch.Tensor:
    """log q_c = log((n_c + 1) / sum_j (n_j + 1)), the add-one training frequencies (C,), float64: the unigram
    proposal's, NCE's unigram noise and the full softmax's `log_prior` bias start."""
    c = label_counts.double() + 1.0                                                                 # (C,)
    return (c / c.sum()).log()


@SAMPLERS.register("unigram")
class Unigram(Sampler):
    def __init__(self, n_classes: int) -> None:
        super().__init__(n_classes)
        self.register_buffer("log_q", torch.full((n_classes,), -math.log(n_classes)))

    def setup(self, label_counts: torch.Tensor) -> None:
        self.log_q = log_unigram(label_counts).float().to(self.log_q.device)

    def sample(self, h, m, gen):
        # query-independent: all B m draws from one distribution (one cumulative sum, not B)
        ids = multinomial(self.log_q.exp(), h.shape[0] * m, gen)
        ids = ids.view(h.shape[0], m)                                                               # (B, m)
        return ids, self.log_prob(h, ids)

    def log_prob(self, h, ids):
        return self.log_q[ids]


@SAMPLERS.register("exact")
class Exact(Sampler):
    """Samples from softmax(tau h E^T) of the current class embeddings (set by `update`)."""

    needs_index = True
    update_every_step = True

    def __init__(self, n_classes: int, tau: float = 1.0, chunk: int | None = None) -> None:
        super().__init__(n_classes)
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
            raise ValueError(f"{type(self).__name__}: sampler_params.chunk must be an integer >= 1, got {chunk!r}")
        self.tau, self.chunk = tau, chunk
        self.E: torch.Tensor | None = None

    def update(self, class_emb, gen):
        self.E = class_emb.detach()

    def _logp(self, h):
        return torch.log_softmax(self.tau * h.detach() @ self.E.T, 1)                               # (B, n)

    def _by_rows(self, f, h, *rest) -> tuple[torch.Tensor, ...]:
        """f over `chunk` query rows at a time (chunk x n scores instead of B x n), outputs concatenated by rows."""
        if self.chunk is None or len(h) <= self.chunk:
            return f(h, *rest)
        parts = [f(h[i:i + self.chunk], *(r[i:i + self.chunk] for r in rest)) for i in range(0, len(h), self.chunk)]
        return tuple(torch.cat(p) for p in zip(*parts))

    def _sample(self, h, m, gen, targets=None):
        logp = self._logp(h)
        ids = multinomial(logp.exp(), m, gen)                                                        # (B, m)
        return (ids, logp.gather(1, ids)) + (() if targets is None else (logp.gather(1, targets),))

    def sample(self, h, m, gen):
        return self._by_rows(lambda q: self._sample(q, m, gen), h)

    def sample_with(self, h, m, gen, targets):
        # the targets' log q from the (B, n) scores the draws were made from: one product and one pass of the
        # scores a step instead of two (MIDX Table 4's Sphere with `correct: both` scored every class twice)
        return self._by_rows(lambda q, t: self._sample(q, m, gen, t), h, targets)

    def log_prob(self, h, ids):
        return self._by_rows(lambda q, i: (self._logp(q).gather(1, i),), h, ids)[0]


@SAMPLERS.register("quadratic_exact")
class QuadraticExact(Exact):
    """The quadratic-kernel proposal (Blanc & Rendle 2018) drawn exactly over all classes:
    q(c | h) ∝ alpha (h^ . c^)^2 + 1 on L2-normalised h, c; O(n d) per query, the `quadratic` tree's
    distribution without its d^2 + 1 features per node (the MIDX paper's "Sphere" at d = 128-200)."""

    def __init__(self, n_classes: int, alpha: float = 100.0, chunk: int | None = None) -> None:
        super().__init__(n_classes, chunk=chunk)
        self.alpha = alpha

    def update(self, class_emb, gen):
        self.E = torch.nn.functional.normalize(class_emb.detach(), dim=1)

    def _logp(self, h):
        # every (B, n) pass in place: the same operations in the same order as alpha (h^.c^)^2 + 1, k / sum, log,
        # so the same bits and draws as the out-of-place form (tests/test_samplers.py), without four (B, n)
        # buffers a step (1 thread, MIDX Table 4 on PTB: 115 -> 106 ms a draw)
        k = torch.nn.functional.normalize(h.detach(), dim=1) @ self.E.T                              # (B, n)
        k.square_().mul_(self.alpha).add_(1.0)
        return k.div_(k.sum(1, keepdim=True)).log_()
