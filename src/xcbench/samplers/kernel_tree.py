"""Kernel-based proposals sampled through a divide-and-conquer tree (Blanc & Rendle 2018).

If K(h, c) = phi(h) . phi(c), then q(i | h) = phi(h).phi(c_i) / phi(h).sum_j phi(c_j). A complete
binary tree over the classes holds for every node the sum S of phi(c) over its leaves. A draw
descends from the root, going left with probability
    a_L / (a_L + a_R),   a = max(phi(h) . S_child, eps)   (a = 0 for a subtree without classes),
so one draw costs O(D log n), and updating one class's phi costs O(D log n) (its path's sums).
`log_prob` is the exact sum of the branch log-probabilities along the path: it equals the brute-
force kernel distribution whenever all node masses are positive (always for `quadratic`), and it
is the exact probability of *this* procedure when RFF masses are clamped (a choice of this package).
The maps act on L2-normalised h and c (the RF-softmax setting); a subclass gives `phi`:
samplers/quadratic.py (Blanc & Rendle), samplers/random_features.py (RFF, Rawat et al. 2019; Random Maclaurin).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from xcbench.samplers.base import Sampler
from xcbench.seed import rand

EPS = 1e-12
# Levels with at most DENSE_PER_DRAW * (draws per query) nodes are scored by one matmul for all their
# nodes; deeper ones by per-draw gathers. A matmul FLOP is far cheaper than a gathered one on a CPU.
# Fastest bound measured (2 cores, min of 5): rff B = 10, m = 10, D = 1000 (RF-softmax Table 2):
# 256-512 nodes (2.5-3.6 ms; 4096: 10.3 ms); rff B = 256, m = 100, D = 128, n = 10^6: 4096 (53 ms;
# 16384: 82 ms); quadratic B = 256, m = 100, D = 16385, n = 10^4: all 8192 (0.9 s; 2048: 1.7 s).
DENSE_PER_DRAW = 64
# _left_mass gathers the draws' rows in chunks of queries of GATHER_BYTES (8 MiB: 40 PTB queries at m = 100,
# D = 512), so that each chunk's rows are still in cache when bmm reads them, unless all of them fit in
# GATHER_ONCE[device type] bytes: a GPU, whose launches cost more than its memory traffic, gathers up to 256 MiB
# in one product (so did the CPU until 2026-12-04: the same weights, and MIDX Figure 7(a)'s RFF step at m = 50 and
# 100 1.10x the chunks' on one idle thread, 1.04x beside two trainings: benchmarks/out/step_forms.md).
GATHER_BYTES = 8 << 20
GATHER_ONCE = {"cpu": GATHER_BYTES, "cuda": 256 << 20}
REBUILD_SHARE = 4  # update_rows rebuilds the whole tree when more than n / 4 rows changed


class KernelTree(Sampler):
    """Storage: only the sums of *left* children (left[l][j] = S of node 2j at level l, l = 1..depth)
    and the root sum; a right child's mass is its parent's mass minus its sibling's,
    phi(h).S_right = phi(h).S_parent - phi(h).S_left. This stores n D floats instead of 2n D and does
    one dot product per level and draw instead of two. The raw (unclamped) mass of the chosen child
    is carried down as the next parent mass; `sample` and `log_prob` run the same arithmetic."""

    needs_index = True

    def __init__(self, n_classes: int, dense_nodes: int | None = None) -> None:
        super().__init__(n_classes)
        self.dense_nodes = dense_nodes  # levels with at most this many nodes: one matmul (None: DENSE_PER_DRAW m)
        self.depth = max(1, math.ceil(math.log2(max(2, n_classes))))
        self.left: list[torch.Tensor | None] = []  # left[l]: (2^(l-1), D), l = 1..depth (left[0] unused)
        self.counts: list[torch.Tensor] = []        # counts[l]: (2^l,) real classes under each node
        self.root: torch.Tensor | None = None       # (D,)
        self.c: torch.Tensor | None = None          # (n, d) normalised class embeddings (for row updates)
        self._leaves: torch.Tensor | None = None    # (2^depth, D) phi of every leaf; left[depth] is a view of it

    def index_gib(self, n: int, d: int) -> float:
        """The tree's left-children sums: 2^ceil(log2 n) nodes of D floats."""
        D = self.phi(torch.zeros(1, d)).shape[1]
        return 2 ** math.ceil(math.log2(max(2, n))) * D * 4 / 2 ** 30

    def phi(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @property
    def phi_c(self) -> torch.Tensor:
        """phi of every class (n, D), recomputed: for tests and small n."""
        return self.phi(self.c)

    def _phi_chunked(self, z: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
        if len(z) <= chunk:  # one chunk: no copy through cat
            return self.phi(z)
        return torch.cat([self.phi(z[s:s + chunk]) for s in range(0, len(z), chunk)])

    def update(self, class_emb, gen=None):  # deterministic: no random draw
        P = 2 ** self.depth
        self.c = F.normalize(class_emb.detach(), dim=1)                                    # (n, d)
        ph = self._phi_chunked(self.c)                                                     # (n, D) real classes only
        leaves = self._leaves
        if leaves is None or leaves.shape != (P, ph.shape[1]) or leaves.dtype != ph.dtype or leaves.device != ph.device:
            # (P, D), padding leaves phi = 0. Kept from one rebuild to the next: only the real rows are written again
            # and row updates touch only real leaves, so the padding stays 0. A fresh buffer each step cost more than
            # the rebuild's sums (RFF on PTB, 1 thread: 20 ms of page faults for a (16384, 512) buffer).
            leaves = self._leaves = ph.new_zeros(P, ph.shape[1])
        leaves[: self.n_classes] = ph
        cnt = torch.zeros(P, device=ph.device)
        cnt[: self.n_classes] = 1
        # leaves: left = even classes, right = odd ones
        lft = leaves[0::2]                                                                 # (P/2, D)
        cur = lft + leaves[1::2]                                                           # level depth-1 sums
        self.left, self.counts = [None] * (self.depth + 1), [None] * (self.depth + 1)
        self.left[self.depth], self.counts[self.depth] = lft, cnt
        for lvl in range(self.depth - 1, 0, -1):
            self.left[lvl] = cur[0::2].contiguous()
            cur = self.left[lvl] + cur[1::2]
            self.counts[lvl] = self.counts[lvl + 1].view(-1, 2).sum(1)
        self.counts[0] = self.counts[1].view(-1, 2).sum(1)
        self.root = cur.squeeze(0)                                                         # (D,)

    def update_rows(self, ids: torch.Tensor, new_emb: torch.Tensor) -> None:
        """Replace the embeddings of classes `ids` (distinct): O(|ids| (D log n + phi cost)) along their
        paths, or one O(n (D + phi cost)) rebuild when more than n / REBUILD_SHARE rows changed (a
        PTB step of 1120 queries x 100 draws touches nearly all 10^4 classes; path updates then
        cost log n times a rebuild). Both give the same tree (tests/test_samplers.py)."""
        new_c = F.normalize(new_emb.detach(), dim=1).to(self.c.dtype)
        if REBUILD_SHARE * len(ids) > self.n_classes:
            c = self.c.clone()
            c[ids] = new_c
            self.update(c, None)
            return
        delta = self.phi(new_c) - self.phi(self.c[ids])                                    # (r, D)
        self.c[ids] = new_c
        node = ids.clone()
        for lvl in range(self.depth, 0, -1):
            is_left = node % 2 == 0
            self.left[lvl].index_add_(0, node[is_left] // 2, delta[is_left])
            node = node // 2
        self.root += delta.sum(0)

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.left if t is not None) + self.root.numel() * 4

    def _left_mass(self, ph: torch.Tensor, node: torch.Tensor, lvl: int) -> torch.Tensor:
        """Raw kernel mass (B, k) of the left child of `node` (B, k) at level lvl.

        Upper levels (at most `dense_nodes`, by default DENSE_PER_DRAW k, left children): one
        (B, D) x (D, 2^lvl) matmul for all of them, then a gather; many draws share these nodes.
        Deeper levels: gather each draw's left-child sum, O(B k D). Both give the same numbers
        (tests/test_rff.py)."""
        S = self.left[lvl + 1]                                                             # (2^lvl, D)
        limit = self.dense_nodes if self.dense_nodes is not None else DENSE_PER_DRAW * node.shape[1]
        if S.shape[0] <= limit:
            return (ph @ S.T).gather(1, node)                                              # (B, k)
        per_query = node.shape[1] * S.shape[1] * S.element_size()                          # bytes of one query's rows
        if node.shape[0] * per_query <= GATHER_ONCE.get(ph.device.type, GATHER_BYTES):
            return torch.bmm(F.embedding(node, S), ph.unsqueeze(2)).squeeze(2)             # (B, k)
        # a few queries at a time, so that their gathered rows stay in cache (one (B, k, D) copy is 143 MB at MIDX
        # Figure 7(a)'s B = 700, k = 100, D = 512, 917 MB at RF-softmax's PTB B = 1120, D = 2048): 2.9x faster
        # at the latter's draw. bmm rounds a batch of one query unlike the same query among others (measured: a
        # batch of one takes another kernel), so every chunk has two queries or more: then the draws and log q are
        # those of one product, bit for bit (tests/test_rff.py; the kept runs' weights: benchmarks/out/step_forms.md)
        B, rows = node.shape[0], max(2, GATHER_BYTES // per_query)
        starts = list(range(0, B, rows))
        if len(starts) > 1 and B - starts[-1] == 1:
            starts.pop()                                                                   # a lone last query joins the chunk before
        out = ph.new_empty(node.shape)                                                     # (B, k)
        for b, e in zip(starts, starts[1:] + [B]):
            out[b:e] = torch.bmm(F.embedding(node[b:e], S), ph[b:e].unsqueeze(2)).squeeze(2)
        return out

    def _branch(self, ph, node, lvl, parent):
        """(log P(left), log P(right), raw left mass, raw right mass) of stepping down from `node`."""
        m_l = self._left_mass(ph, node, lvl)
        m_r = parent - m_l
        cnt = self.counts[lvl + 1]
        a_l = torch.where(cnt[2 * node] > 0, m_l.clamp(min=EPS), torch.zeros_like(m_l))
        a_r = torch.where(cnt[2 * node + 1] > 0, m_r.clamp(min=EPS), torch.zeros_like(m_r))
        tot = (a_l + a_r).log()
        return a_l.log() - tot, a_r.log() - tot, m_l, m_r

    def _start(self, h, k):
        ph = self.phi(F.normalize(h.detach(), dim=1).to(self.root.dtype))                 # (B, D)
        parent = (ph @ self.root).unsqueeze(1).expand(-1, k).contiguous()                 # (B, k) root mass
        return ph, parent

    def sample(self, h, m, gen):
        ph, parent = self._start(h, m)
        node = torch.zeros(h.shape[0], m, dtype=torch.long, device=h.device)
        log_q = torch.zeros(h.shape[0], m, dtype=ph.dtype, device=h.device)
        # every level's uniforms in one draw and one copy to the device (a copy per level synchronised a GPU step
        # 13 times); on a CPU generator the same numbers, in the same order, as a draw per level
        u = rand((self.depth, *node.shape), gen, h.device)                               # (depth, B, m)
        for lvl in range(self.depth):
            lp_l, lp_r, m_l, m_r = self._branch(ph, node, lvl, parent)
            go_right = u[lvl].log() >= lp_l                                                # P(right) = 1 - e^lp_l
            log_q += torch.where(go_right, lp_r, lp_l)
            parent = torch.where(go_right, m_r, m_l)
            node = 2 * node + go_right.long()
        return node, log_q.float()

    def log_prob(self, h, ids):
        ph, parent = self._start(h, ids.shape[1])
        log_q = torch.zeros(ids.shape, dtype=ph.dtype, device=ids.device)
        for lvl in range(self.depth):
            node = ids >> (self.depth - lvl)                                               # ancestor at lvl
            right = ((ids >> (self.depth - lvl - 1)) & 1).bool()
            lp_l, lp_r, m_l, m_r = self._branch(ph, node, lvl, parent)
            log_q += torch.where(right, lp_r, lp_l)
            parent = torch.where(right, m_r, m_l)
        return log_q.float()
