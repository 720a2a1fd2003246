"""The quadratic kernel proposal of Blanc & Rendle (2018): K(h, c) = alpha (h.c)^2 + 1 on L2-normalised h and c,
phi(z) = [sqrt(alpha) vec(z z^T), 1] (D = d^2 + 1), drawn through the kernel tree (samplers/kernel_tree.py) or by
scoring every class; both give q(i | h) = K(h, c_i) / sum_j K(h, c_j) exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from xcbench.registry import SAMPLERS
from xcbench.samplers.kernel_tree import KernelTree
from xcbench.seed import multinomial


@SAMPLERS.register("quadratic")
class Quadratic(KernelTree):
    """K = alpha (h.c)^2 + 1, through the tree or by scoring every class (`draw`):

      tree:   m (d^2 + 1) log2 n multiply-adds per query to walk down (phi has d^2 + 1 features), and as
              many again after the step to refresh the paths of the rows it moved (the m draws and the
              target: (m + 1) (d^2 + 1) log2 n at most); n (d^2 + 1) floats;
      scores: d n per query, the one (B, d) x (d, n) product a full softmax makes, then m draws from
              the row's n kernel values (torch.multinomial, inverse CDF); n d floats.
      auto:   the cheaper of the two by that count, given the head's draws per query m (`draws`):
              scores when d n < (2 m + 1) (d^2 + 1) log2 n. At m = 100 and d = 200 (RF-softmax on PTB)
              the crossover is n ~ 8.1e5: at n = 10^4 the tree costs 113M per query, 56x the scores' 2M.
              At d = 128 it is n ~ 4.9e5, so WikiLSHTC-325K (RF-softmax Table 3) draws by scores: the walk
              alone (31M against 42M) would have picked a 32 GiB tree.
    Both give the same distribution, so the same `log_prob` (tests/test_samplers.py); their draws differ.
    The default stays `tree`: runs kept under that name keep their draws."""

    DRAWS = ("tree", "scores", "auto")

    def __init__(self, n_classes: int, alpha: float = 100.0, dense_nodes: int | None = None,
                 draw: str = "tree") -> None:
        super().__init__(n_classes, dense_nodes)
        if draw not in self.DRAWS:
            raise ValueError(f"quadratic: draw must be one of {self.DRAWS}, got {draw!r}")
        self.alpha, self.draw = alpha, draw
        self.by_scores = draw == "scores"

    def phi(self, z):
        outer = (z.unsqueeze(-1) * z.unsqueeze(-2)).flatten(-2) * math.sqrt(self.alpha)    # (..., d^2)
        return torch.cat([outer, torch.ones(*z.shape[:-1], 1, dtype=z.dtype, device=z.device)], -1)

    def scores_cheaper(self, n: int, d: int) -> bool:
        """Counted multiply-adds per query: d n (scores) against (2 m + 1) (d^2 + 1) log2 n (the tree's walk and
        its path refresh), m = `draws`."""
        m = self.draws if self.draws is not None else 1
        return d * n < (2 * m + 1) * (d * d + 1) * max(1, math.ceil(math.log2(max(2, n))))

    def draws_by_scores(self, n: int, d: int) -> bool:
        """Whether n classes of width d are drawn by scoring every class (`draw`, and for `auto` the count)."""
        return self.draw == "scores" or (self.draw == "auto" and self.scores_cheaper(n, d))

    def update(self, class_emb, gen=None):
        self.by_scores = self.draws_by_scores(self.n_classes, class_emb.shape[1])
        if not self.by_scores:
            return super().update(class_emb, gen)
        self.c = F.normalize(class_emb.detach(), dim=1)                                    # (n, d)
        self.left, self.root = [], None

    def update_rows(self, ids, new_emb):
        if not self.by_scores:
            return super().update_rows(ids, new_emb)
        self.c[ids] = F.normalize(new_emb.detach(), dim=1).to(self.c.dtype)

    def memory_bytes(self) -> int:
        return self.c.numel() * self.c.element_size() if self.by_scores else super().memory_bytes()

    def index_gib(self, n: int, d: int) -> float:
        return n * d * 4 / 2 ** 30 if self.draws_by_scores(n, d) else super().index_gib(n, d)

    def _kernel(self, h):
        """(B, n) kernel values alpha (h^.c^)^2 + 1 and their row sums (B, 1)."""
        k = (F.normalize(h.detach(), dim=1).to(self.c.dtype) @ self.c.T).square_().mul_(self.alpha).add_(1.0)
        return k, k.sum(1, keepdim=True)

    def sample(self, h, m, gen):
        if not self.by_scores:
            return super().sample(h, m, gen)
        k, tot = self._kernel(h)
        ids = multinomial(k, m, gen)                                                       # (B, m)
        return ids, (k.gather(1, ids).log() - tot.log()).float()

    def log_prob(self, h, ids):
        if not self.by_scores:
            return super().log_prob(h, ids)
        k, tot = self._kernel(h)
        return (k.gather(1, ids).log() - tot.log()).float()
