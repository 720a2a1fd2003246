"""Hashing forest (HF): the approximate optimal selector of Zhang et al. 2018 (section "Approximated
Selection", Algorithm 1).

Build (one tree): start from all classes as one cell; while a cell holds more than `leaf` (B) classes,
pick two of its classes w_i != w_j at random and split the cell by the hyperplane that separates them
with maximum margin, normal n = w_i - w_j through their midpoint:
    left = {w : n . w >= n . (w_i + w_j) / 2},   right = the rest.
(Algorithm 1 writes the normal as (w_i + w_j) / 2; the prose's max-margin split is implemented, see
research/method-notes.md.) Rows are L2-normalised first, so the trees work in the cosine geometry that
the query's re-ranking uses. A split that leaves a side empty (duplicate rows) halves the cell instead.
Every tree partitions the classes: each class is in exactly one leaf. `trees` (L) trees form the forest.

Query with quota Q: walk from the root, taking the side of each boundary that the unit query falls on,
while the next node still holds at least Q classes; the node reached (the parent of the first node
below Q) gives its classes. `pool` r > 1 (not in the paper; Annoy's search_k idea) stops the same walk
at the deepest node holding at least r Q classes, so each tree contributes a larger cell around the
query to the re-ranked pool (r = 1 is the paper's walk). The classes pooled over the L trees are re-ranked by cosine to the query
and the Q closest are the example's selection (`rerank: inner` ranks the pool by the response w_c . x
instead, the quantity Optimal ranks by: rows' norms differ, so the two orders differ). Build O(L C d log(C / B)); query O(L (log(C / Q) d + Q d)).
The pooled cells are handled as flat (query, class) pairs: a padded (B, L x largest cell, d) tensor
was 3-7x slower at 10^4-3x10^5 classes and took gigabytes for large cells.

All L trees live in flat arrays and grow together, one level at a time; the descent runs for every
(example, tree) pair at once, one tensor operation per level. For C <= GRAM_MAX the projections
n . w = w . w_i - w . w_j are read from the Gram matrix (one C x C product per build) instead of
gathering a (T, d) block per level; both paths give the same trees (tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xcbench.registry import SELECTORS
from xcbench.selectors.base import IndexedSelector

RERANK = ("cosine", "inner")  # the text's cosine, or the response w . x that Optimal ranks by
CHUNK = 1024      # rows per gathered block: its (CHUNK, d) temporaries stay in cache (65,536 rows: 6x slower)
GRAM_MAX = 16384  # up to this many classes the build reads projections from the Gram matrix U U^T


def _rowdot(A: torch.Tensor, ia: torch.Tensor, B: torch.Tensor, ib: torch.Tensor) -> torch.Tensor:
    """sum_j A[ia, j] B[ib, j] in blocks.  (len(ia),)  index_select: on the CPU 6x faster than A[ia] for rows"""
    return torch.cat([(A.index_select(0, ia[s:s + CHUNK]) * B.index_select(0, ib[s:s + CHUNK])).sum(1)
                      for s in range(0, len(ia), CHUNK)]) \
        if len(ia) else torch.zeros(0, device=A.device, dtype=A.dtype)


def _rows(A: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """A[idx] for an index tensor of any shape, by index_select.  idx.shape + A.shape[1:]"""
    return A.index_select(0, idx.reshape(-1)).reshape(*idx.shape, *A.shape[1:])


def _ranges(start: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For segments (start, n): (segment id of each element, its position start + offset)."""
    seg = torch.repeat_interleave(torch.arange(len(n), device=n.device), n)
    offs = torch.arange(int(n.sum()), device=n.device) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
    return seg, start[seg] + offs


class Forest:
    """L hashing trees over the unit rows U (C, d), in flat node arrays."""

    def __init__(self, U: torch.Tensor, trees: int, leaf: int, gen: torch.Generator) -> None:
        """Grow all L trees level by level at once: their cells are disjoint segments of one (L C,)
        order array (tree l's classes start at l C), so each level is a few tensor operations."""
        C, d, dev = U.shape[0], U.shape[1], U.device
        self.U, self.C = U, C
        G = U @ U.T if C <= GRAM_MAX else None                                                  # (C, C) for small C
        order = torch.arange(C, device=dev).repeat(trees)                                       # (L C,)
        start = torch.arange(trees, device=dev) * C
        size = torch.full((trees,), C, device=dev)
        left, right = torch.full((trees,), -1, device=dev), torch.full((trees,), -1, device=dev)
        normal, thr = torch.zeros(trees, d, device=dev, dtype=U.dtype), torch.zeros(trees, device=dev, dtype=U.dtype)
        frontier, depth = torch.nonzero(size > leaf).squeeze(1), 0
        while len(frontier):
            Fn, st, sz = len(frontier), start[frontier], size[frontier]
            a = (torch.rand(Fn, generator=gen, device=gen.device).to(dev) * sz).long().clamp(max=sz - 1)
            b = (torch.rand(Fn, generator=gen, device=gen.device).to(dev) * (sz - 1)).long().clamp(max=sz - 2)
            b = b + (b >= a)                                                                    # j != i
            ci, cj = order[st + a], order[st + b]                                               # pivots (F,)
            ui, uj = U[ci], U[cj]                                                               # (F, d)
            nrm, t = ui - uj, ((ui - uj) * (ui + uj)).sum(1) / 2                                # max-margin plane
            seg, pos = _ranges(st, sz)
            w = order[pos]
            if G is None:
                go_left = _rowdot(U, w, nrm, seg) >= t[seg]                                     # (T,)
            else:  # n . w = w . u_i - w . u_j from the Gram matrix: scalar gathers instead of (T, d) ones
                go_left = G[w, ci[seg]] - G[w, cj[seg]] >= t[seg]
            nl = torch.zeros(Fn, dtype=torch.long, device=dev).index_add_(0, seg, go_left.long())
            bad = (nl == 0) | (nl == sz)
            if bad.any():  # duplicate rows: halve the cell by position
                go_left = torch.where(bad[seg], (pos - st[seg]) < (sz // 2)[seg], go_left)
                nl = torch.where(bad, sz // 2, nl)
            perm = torch.argsort(seg * 2 + (~go_left).long(), stable=True)                     # left first per cell
            order[pos] = order[pos[perm]]
            n0 = len(start)
            li, ri = torch.arange(n0, n0 + Fn, device=dev), torch.arange(n0 + Fn, n0 + 2 * Fn, device=dev)
            start, size = torch.cat([start, st, st + nl]), torch.cat([size, nl, sz - nl])
            none = torch.full((2 * Fn,), -1, device=dev)
            left, right = torch.cat([left, none]), torch.cat([right, none])
            left[frontier], right[frontier] = li, ri
            normal = torch.cat([normal, torch.zeros(2 * Fn, d, device=dev, dtype=U.dtype)])
            thr = torch.cat([thr, torch.zeros(2 * Fn, device=dev, dtype=U.dtype)])
            normal[frontier], thr[frontier] = nrm, t
            kids = torch.cat([li, ri])
            frontier, depth = kids[size[kids] > leaf], depth + 1
        self.roots = torch.arange(trees, device=dev)                                            # (L,)
        self.order, self.start, self.size, self.left, self.right = order, start, size, left, right
        self.normal, self.thr, self.depth = normal, thr, depth

    def leaves(self) -> list[list[torch.Tensor]]:
        """Per tree, the class ids of each leaf (for tests)."""
        leaf = torch.nonzero(self.left < 0).squeeze(1)
        tree = self.start[leaf] // self.C
        return [[self.order[s:s + n] for s, n in zip(self.start[leaf[tree == l]].tolist(), self.size[leaf[tree == l]].tolist())]
                for l in range(len(self.roots))]

    def descend(self, x: torch.Tensor, Q: int) -> torch.Tensor:
        """The node reached by every (query, tree): the deepest node on the query's path holding >= Q
        classes.  x (B, d) unit rows -> (B, L) node ids."""
        cur = self.roots.unsqueeze(0).expand(len(x), -1).clone()                                # (B, L)
        for _ in range(self.depth):
            lft = self.left[cur]
            inner = lft >= 0
            if not inner.any():
                break
            side = (x.unsqueeze(1) * _rows(self.normal, cur)).sum(-1) >= self.thr[cur]        # (B, L)
            child = torch.where(side, lft, self.right[cur])
            go = inner & (self.size[child.clamp(min=0)] >= Q)
            if not go.any():
                break
            cur = torch.where(go, child, cur)
        return cur

    def query(self, x: torch.Tensor, Q: int, norms: torch.Tensor | None = None,
              pool: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """Per query the Q pooled classes of highest cosine (with `norms`, of highest response
        |w_c| cos = w_c . x / |x|) among the cells reached by walks that stop at pool x Q classes:
        flat (query row, class id) pairs, by row."""
        return self._pool(x, self.descend(x, pool * Q), Q, norms)                            # nodes (B, L)

    def _pool(self, x: torch.Tensor, node: torch.Tensor, Q: int,
              norms: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        node = node.reshape(-1)                                                                 # (B L,)
        L = len(self.roots)
        row = torch.arange(len(x), device=x.device).repeat_interleave(L)
        seg, pos = _ranges(self.start[node], self.size[node])
        key = torch.unique(row[seg] * self.C + self.order[pos])                                 # pooled, deduplicated
        q, c = key // self.C, key % self.C
        uc, inv = torch.unique(c, return_inverse=True)
        if len(x) * len(uc) <= 8 * len(c):  # few distinct classes: one (B, |uc|) product beats |pairs| gathered rows
            cos = (x @ self.U.index_select(0, uc).T)[q, inv]
        else:
            cos = _rowdot(x, q, self.U, c)
        if norms is not None:
            cos = cos * norms[c]
        by_score = torch.argsort(-cos, stable=True)
        idx = by_score[torch.argsort(q[by_score], stable=True)]                                 # by row, then score
        q, c = q[idx], c[idx]
        count = torch.bincount(q, minlength=len(x))
        rank = torch.arange(len(q), device=x.device) - (torch.cumsum(count, 0) - count)[q]
        keep = rank < Q
        return q[keep], c[keep]


@SELECTORS.register("hf")
class HashingForest(IndexedSelector):
    def __init__(self, n_classes: int, trees: int = 50, leaf: int = 16, rebuild_every: int | None = 100,
                 rerank: str = "cosine", pool: int = 1) -> None:
        super().__init__(n_classes, rebuild_every)
        if rerank not in RERANK:
            raise ValueError(f"hf: rerank must be one of {RERANK}, got {rerank!r}")
        if int(pool) != pool or pool < 1:
            raise ValueError(f"hf: pool must be an integer >= 1 (1: the paper's walk), got {pool!r}")
        self.trees, self.leaf, self.rerank, self.pool = trees, leaf, rerank, int(pool)
        self.forest: Forest | None = None
        self.norms: torch.Tensor | None = None

    def build(self, E, gen):
        self.forest = Forest(F.normalize(E.float(), dim=1), self.trees, self.leaf, gen)
        self.norms = E.float().norm(dim=1)                                                      # (C,)

    def per_example(self, h: torch.Tensor, q: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(query row, class) pairs of each example's q selected classes."""
        return self.forest.query(F.normalize(h.float(), dim=1), q, self.norms if self.rerank == "inner" else None,
                                 self.pool)

    def candidates(self, h, y, q, gen):
        return self.per_example(h, q)[1]

