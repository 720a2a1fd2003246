"""Hashing forest (HF): the approximate optimal selector of Zhang et al. 2018 (section "Approximated
Selection", Algorithm 1).

Build (one tree): start from all classes as one cell; while a cell holds more than `leaf` (B) classes,
pick two of its classes w_i != w_j at random and split the cell by the hyperplane that separates them
with maximum margin, normal n = w_i - w_j through their midpoint:
    left = {w : n . w >= n . (w_i + w_j) / 2},   right = the rest.
(Algorithm 1 writes the normal as (w_i + w_j) / 2; the prose's max-margin split is implemented: the
midpoint formula would not separate the two classes.) Rows are L2-normalised first, so the trees work in the cosine geometry that
the query's re-ranking uses. A split that leaves a side empty (duplicate rows) halves the cell instead.
Every tree partitions the classes: each class is in exactly one leaf. `trees` (L) trees form the forest.

Query with quota Q: walk from the root, taking the side of each boundary that the unit query falls on,
while the next node still holds at least Q classes; the node reached (the parent of the first node
below Q) gives its classes. `pool` r > 1 (not in the paper; Annoy's search_k idea) stops the same walk
at the deepest node holding at least r Q classes, so each tree contributes a larger cell around the
query to the re-ranked pool (r = 1 is the paper's walk). The classes pooled over the L trees are re-ranked by cosine to the query
and the Q closest are the example's selection (`rerank: inner` ranks the pool by the response w_c . x
instead, the quantity Optimal ranks by: rows' norms differ, so the two orders differ). Build O(L C d log(C / B));
query O(L (log(C / Q) d + Q d)).

`probe` k > 0 and `probe_width` w (not in the paper) add best-first walks from the untaken sides nearest
to the query (selectors/probe.py).

`prefilter` k > 0 (not in the paper) scores the pool from bfloat16 rows first and re-scores the k Q best
exactly (selectors/rerank.py, which scores and cuts every query's pool).

All L trees live in flat arrays and grow together, one level at a time; the descent runs for every
(example, tree) pair at once, one tensor operation per level. For C <= GRAM_MAX the projections
n . w = w . w_i - w . w_j are read from the Gram matrix (one C x C product per build); above it, levels
with at most GEMM_PER_TREE cells per tree use (C, cells) products U n^T, deeper ones gather a (T, d)
block; all paths give the same trees (tests).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from xcbench.registry import SELECTORS
from xcbench.selectors.base import IndexedSelector
from xcbench.selectors.probe import best_first
from xcbench.selectors.rerank import best_of_pool
from xcbench.selectors.segments import ranges as _ranges
from xcbench.selectors.segments import rowdot as _rowdot

RERANK = ("cosine", "inner")  # the text's cosine, or the response w . x that Optimal ranks by
GRAM_MAX = 16384  # up to this many classes the build reads projections from the Gram matrix U U^T
GEMM_PER_TREE = 32  # while a level has at most this many cells per tree, project by (C, cells) products
GEMM_BLOCK = 256    # cells per product: a (C, 256) block (1 GB at C = 10^6)


def _project(U: torch.Tensor, w: torch.Tensor, nrm: torch.Tensor, seg: torch.Tensor, sz: torch.Tensor) -> torch.Tensor:
    """n_seg . u_w for the level's (class, cell) elements, which are ordered by cell: per block of
    GEMM_BLOCK cells one (C, block) product U n^T, read at the elements of those cells.  (len(w),)
    A product costs C d per cell, a gathered row d per element (L C per level), and BLAS runs 10-20x
    faster than gathers, so the build uses this while the level has few cells (measured at C = 10^6)."""
    out = torch.empty(len(w), device=U.device, dtype=U.dtype)
    ends = [0] + torch.cumsum(sz, 0).tolist()
    for s in range(0, len(nrm), GEMM_BLOCK):
        e = min(s + GEMM_BLOCK, len(nrm))
        a, b = ends[s], ends[e]
        out[a:b] = (U @ nrm[s:e].T)[w[a:b], seg[a:b] - s]                                  # (C, e - s) read at T
    return out


class Forest:
    """L hashing trees over the unit rows U (C, d), in flat node arrays."""

    def __init__(self, U: torch.Tensor, trees: int, leaf: int, gen: torch.Generator) -> None:
        """Grow all L trees level by level at once: their cells are disjoint segments of one (L C,)
        order array (tree l's classes start at l C), so each level is a few tensor operations."""
        C, d, dev = U.shape[0], U.shape[1], U.device
        self.U, self.C, self.Ub = U, C, None  # Ub: U in bfloat16, made by the first query that prefilters
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
            if G is None and Fn <= GEMM_PER_TREE * trees:  # few cells: (C, cells) products
                go_left = _project(U, w, nrm, seg, sz) >= t[seg]                                # (T,)
            elif G is None:
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
        self.nnorm = normal.norm(dim=1).clamp_min(1e-12)                                        # |n| per node

    def leaves(self) -> list[list[torch.Tensor]]:
        """Per tree, the class ids of each leaf (for tests)."""
        leaf = torch.nonzero(self.left < 0).squeeze(1)
        tree = self.start[leaf] // self.C
        return [[self.order[s:s + n] for s, n in zip(self.start[leaf[tree == l]].tolist(), self.size[leaf[tree == l]].tolist())]
                for l in range(len(self.roots))]

    def descend(self, x: torch.Tensor, Q: int, start: torch.Tensor | None = None,
                record: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The node reached by every (query, walk): the deepest node on the query's path holding >= Q
        classes.  x (B, d) unit rows, walks from the roots (or from `start` (B, K) nodes, -1: no walk, which
        stays -1) -> (B, K) node ids; with `record`, also each step's untaken sibling (B, K, D) (-1 where
        the walk did not step) and the query's distance to that step's boundary |n . x - t| / |n| (inf
        there).  Each level computes only the walks still going (a probe's walk from a deep side ends
        within a few levels while the deepest leaf lies `depth` levels down)."""
        cur = (self.roots.unsqueeze(0).expand(len(x), -1) if start is None else start).reshape(-1).clone()  # (B K,)
        K = len(cur) // max(len(x), 1)
        act = torch.nonzero(cur >= 0).squeeze(1)                                                # walks going
        if record:
            sibs = torch.full((len(cur), max(self.depth, 1)), -1, device=x.device, dtype=cur.dtype)
            gaps = torch.full((len(cur), max(self.depth, 1)), torch.inf, device=x.device, dtype=x.dtype)
        D = 0
        for lvl in range(self.depth):
            c = cur.index_select(0, act)
            lft = self.left.index_select(0, c)
            i = torch.nonzero(lft >= 0).squeeze(1)                                             # inner nodes
            if not len(i):
                break
            act, c, lft = act.index_select(0, i), c.index_select(0, i), lft.index_select(0, i)
            proj = (x.index_select(0, act // K) * self.normal.index_select(0, c)).sum(-1) - self.thr[c]  # (A,)
            side = proj >= 0
            child = torch.where(side, lft, self.right.index_select(0, c))
            i = torch.nonzero(self.size.index_select(0, child) >= Q).squeeze(1)                 # steps taken
            if not len(i):
                break
            act, c, child, side, proj = (t.index_select(0, i) for t in (act, c, child, side, proj))
            if record:
                sibs[act, lvl] = torch.where(side, self.right[c], self.left[c])
                gaps[act, lvl] = proj.abs() / self.nnorm[c]
            cur[act], D = child, lvl + 1
        cur = cur.view(len(x), K)
        if not record:
            return cur, None, None
        return cur, sibs[:, :D].reshape(len(x), K, D), gaps[:, :D].reshape(len(x), K, D)

    def probes(self, x: torch.Tensor, Q: int, probe: int, width: int = 1) -> torch.Tensor:
        """The paper's walk in every tree, then `probe` x L best-first walks (selectors/probe.py).
        x (B, d) -> nodes (B, <= L (1 + probe)), -1 where fewer sides were left."""
        return best_first(self, x, Q, probe, width)

    def query(self, x: torch.Tensor, Q: int, norms: torch.Tensor | None = None,
              pool: int = 1, probe: int = 0, prefilter: int = 0, width: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """Per query the Q pooled classes of highest cosine (with `norms`, of highest response
        |w_c| cos = w_c . x / |x|) among the cells reached by walks that stop at pool x Q classes
        (and, with `probe`, by the multi-probe walks): flat (query row, class id) pairs, by row.
        `prefilter` k > 0 scores the pooled classes from a bfloat16 copy of the rows first and only the
        k Q best of them exactly (where the pool is gathered rather than read off one product)."""
        node = self.probes(x, pool * Q, probe, width) if probe else self.descend(x, pool * Q)[0]  # (B, <= L (1 + probe))
        return self._pool(x, node, Q, norms, prefilter)

    def _pool(self, x: torch.Tensor, node: torch.Tensor, Q: int,
              norms: torch.Tensor | None = None, prefilter: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The Q best of each query's pooled cells (nodes (B, K), -1: none), ranked by rerank.best_of_pool."""
        cand = self.cells(node)                                                                 # (B, P)
        rows, ids, self.short = best_of_pool(self.U, x, cand, self.pooled, Q, norms, prefilter, self.low)
        return rows, ids

    def low(self) -> torch.Tensor:
        """U in bfloat16 (half the bytes; a prefilter's first pass), made once per forest.  (C, d)"""
        if self.Ub is None:
            self.Ub = self.U.bfloat16()
        return self.Ub

    def cells(self, node: torch.Tensor) -> torch.Tensor:
        """The classes of each query's cells (nodes (B, K), -1: none) as a padded (B, P) table of class ids,
        each class once per row, packed to the left (C: padding): one sort per row, no global sort.
        Sets `pooled` (B,), the distinct classes of each row."""
        B, K = node.shape
        ok = node >= 0
        n = torch.where(ok, self.size[node.clamp(min=0)], 0)                                    # (B, K) cell sizes
        cnt = n.sum(1)                                                                          # (B,)
        seg, pos = _ranges(self.start[node.clamp(min=0)].reshape(-1), n.reshape(-1))
        row = seg // K
        col = torch.arange(len(seg), device=node.device) - (torch.cumsum(cnt, 0) - cnt)[row]
        cand = torch.full((B, max(int(cnt.max()), 1)), self.C, device=node.device)
        cand = cand.index_put_((row, col), self.order[pos]).sort(1).values                       # (B, P)
        cand[:, 1:].masked_fill_(cand[:, 1:] == cand[:, :-1], self.C)                           # each class once
        real = cand < self.C
        self.pooled = real.sum(1)                                                               # (B,) distinct pooled classes
        P = max(int(self.pooled.max()), 1)
        at = torch.where(real, torch.cumsum(real, 1) - 1, cand.shape[1])                        # packed to the left
        return torch.full((B, cand.shape[1] + 1), self.C, device=node.device).scatter_(1, at, cand)[:, :P]


def _whole(name: str, v, least: int, meaning: str) -> int:
    """hf's integer setting `name` as an int, or a ValueError that says what its least value means."""
    if int(v) != v or v < least:
        raise ValueError(f"hf: {name} must be an integer >= {least} ({least}: {meaning}), got {v!r}")
    return int(v)


@SELECTORS.register("hf")
class HashingForest(IndexedSelector):
    def __init__(self, n_classes: int, trees: int = 50, leaf: int = 16, rebuild_every: int | None = 100,
                 rerank: str = "cosine", pool: int = 1, probe: int = 0, prefilter: int = 0,
                 probe_width: int = 1) -> None:
        super().__init__(n_classes, rebuild_every)
        if rerank not in RERANK:
            raise ValueError(f"hf: rerank must be one of {RERANK}, got {rerank!r}")
        self.trees, self.leaf, self.rerank = trees, leaf, rerank
        self.pool = _whole("pool", pool, 1, "the paper's walk")
        self.probe = _whole("probe", probe, 0, "the paper's walk alone")
        self.prefilter = _whole("prefilter", prefilter, 0, "score every pooled class exactly")
        self.probe_width = _whole("probe_width", probe_width, 1, "one walk per tree a round")
        self.forest: Forest | None = None
        self.norms: torch.Tensor | None = None

    def build(self, E, gen):
        self.forest = Forest(F.normalize(E.float(), dim=1), self.trees, self.leaf, gen)
        self.norms = E.float().norm(dim=1)                                                      # (C,)

    def per_example(self, h: torch.Tensor, q: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(query row, class) pairs of each example's q selected classes."""
        return self.forest.query(F.normalize(h.float(), dim=1), q, self.norms if self.rerank == "inner" else None,
                                 self.pool, self.probe, self.prefilter, self.probe_width)

    def candidates(self, h, y, q, gen):
        return self.per_example(h, q)[1]

