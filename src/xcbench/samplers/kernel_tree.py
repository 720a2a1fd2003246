"""Kernel-based proposals sampled through a divide-and-conquer tree (Blanc & Rendle 2018).

If K(h, c) = phi(h) . phi(c), then q(i | h) = phi(h).phi(c_i) / phi(h).sum_j phi(c_j). A complete
binary tree over the classes stores at every node the sum S of phi(c) over its leaves. A draw
descends from the root, going left with probability
    a_L / (a_L + a_R),   a = max(phi(h) . S_child, eps)   (a = 0 for a subtree without classes),
so one draw costs O(D log n), and updating one class's phi costs O(D log n) (its path's sums).
`log_prob` is the exact sum of the branch log-probabilities along the path: it equals the brute-
force kernel distribution whenever all node masses are positive (always for `quadratic`), and it
is the exact probability of *this* procedure when RFF masses are clamped (method-notes, choice).
Both maps act on L2-normalised h and c (the RF-softmax setting).

  quadratic (Blanc & Rendle): K = alpha (h.c)^2 + 1, phi(z) = [sqrt(alpha) vec(z z^T), 1], D = d^2 + 1
  rff (Rawat et al. 2019):    phi(u) = D^-1/2 [cos(w_k . u), sin(w_k . u)]_k, w_k ~ N(0, nu I), so that
                              E[phi(x).phi(y)] = exp(-nu ||x - y||^2 / 2); the same fixed w_k serve
                              queries and classes and are redrawn only by `reseed`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from xcbench.registry import SAMPLERS
from xcbench.samplers.base import Sampler

EPS = 1e-12


class KernelTree(Sampler):
    needs_index = True

    def __init__(self, n_classes: int) -> None:
        super().__init__(n_classes)
        self.depth = max(1, math.ceil(math.log2(max(2, n_classes))))
        self.levels: list[torch.Tensor] = []   # levels[l]: (2^l, D) node sums, l = 0 root .. depth leaves
        self.counts: list[torch.Tensor] = []   # real classes under each node
        self.phi_c: torch.Tensor | None = None

    def phi(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def update(self, class_emb):
        P = 2 ** self.depth
        phi = self.phi(F.normalize(class_emb.detach(), dim=1))                             # (n, D)
        leaves = torch.zeros(P, phi.shape[1], dtype=phi.dtype, device=phi.device)
        leaves[: self.n_classes] = phi
        cnt = torch.zeros(P, device=phi.device)
        cnt[: self.n_classes] = 1
        self.phi_c, self.levels, self.counts = phi, [leaves], [cnt]
        for _ in range(self.depth):
            self.levels.insert(0, self.levels[0].view(-1, 2, phi.shape[1]).sum(1))
            self.counts.insert(0, self.counts[0].view(-1, 2).sum(1))

    def update_rows(self, ids: torch.Tensor, new_emb: torch.Tensor) -> None:
        """Replace the embeddings of classes `ids` (distinct): O(|ids| D log n)."""
        new = self.phi(F.normalize(new_emb.detach(), dim=1))
        delta = new - self.phi_c[ids]
        self.phi_c[ids] = new
        node = ids.clone()
        for lvl in range(self.depth, -1, -1):
            self.levels[lvl].index_add_(0, node, delta)
            node = node // 2

    def _branch(self, ph: torch.Tensor, node: torch.Tensor, lvl: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities (left, right) of stepping from `node` at level lvl to its children."""
        kids = torch.stack([2 * node, 2 * node + 1], -1)                                   # (..., 2)
        mass = (ph.unsqueeze(-2) * self.levels[lvl + 1][kids]).sum(-1)                     # (..., 2)
        mass = torch.where(self.counts[lvl + 1][kids] > 0, mass.clamp(min=EPS), torch.zeros_like(mass))
        logp = mass.log() - mass.sum(-1, keepdim=True).log()
        return logp[..., 0], logp[..., 1]

    def sample(self, h, m, gen):
        ph = self.phi(F.normalize(h.detach(), dim=1)).unsqueeze(1).expand(-1, m, -1)      # (B, m, D)
        node = torch.zeros(h.shape[0], m, dtype=torch.long, device=h.device)
        log_q = torch.zeros(h.shape[0], m, dtype=ph.dtype, device=h.device)
        for lvl in range(self.depth):
            lp_l, lp_r = self._branch(ph, node, lvl)
            go_right = torch.rand(node.shape, generator=gen, device=h.device).log() >= lp_l   # P(right) = 1 - e^lp_l
            log_q += torch.where(go_right, lp_r, lp_l)
            node = 2 * node + go_right.long()
        return node, log_q.float()

    def log_prob(self, h, ids):
        ph = self.phi(F.normalize(h.detach(), dim=1)).unsqueeze(1).expand(-1, ids.shape[1], -1)
        log_q = torch.zeros(ids.shape, dtype=ph.dtype, device=ids.device)
        for lvl in range(self.depth):
            node = ids >> (self.depth - lvl)                                               # ancestor at lvl
            right = ((ids >> (self.depth - lvl - 1)) & 1).bool()
            lp_l, lp_r = self._branch(ph, node, lvl)
            log_q += torch.where(right, lp_r, lp_l)
        return log_q.float()


@SAMPLERS.register("quadratic")
class Quadratic(KernelTree):
    def __init__(self, n_classes: int, alpha: float = 100.0) -> None:
        super().__init__(n_classes)
        self.alpha = alpha

    def phi(self, z):
        outer = (z.unsqueeze(-1) * z.unsqueeze(-2)).flatten(-2) * math.sqrt(self.alpha)    # (..., d^2)
        return torch.cat([outer, torch.ones(*z.shape[:-1], 1, dtype=z.dtype, device=z.device)], -1)


@SAMPLERS.register("rff")
class RFF(KernelTree):
    def __init__(self, n_classes: int, D: int = 1024, nu: float = 4.0, seed: int = 0) -> None:
        super().__init__(n_classes)
        self.D, self.nu, self.seed = D, nu, seed
        self.w: torch.Tensor | None = None

    def reseed(self, seed: int) -> None:
        """Redraw the random features (the only way they change); rebuild with `update` after."""
        self.seed, self.w = seed, None

    def phi(self, z):
        if self.w is None or self.w.shape[1] != z.shape[-1]:
            g = torch.Generator().manual_seed(self.seed)
            self.w = (torch.randn(self.D, z.shape[-1], generator=g) * math.sqrt(self.nu)).to(z.device)  # (D, d)
        p = z @ self.w.T                                                                   # (..., D)
        return torch.cat([p.cos(), p.sin()], -1) / math.sqrt(self.D)                       # (..., 2D)
