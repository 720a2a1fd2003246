"""Re-ranking a query's pooled classes: the last step of the hashing forest's query (selectors/forest.py).

Each query b holds a row of pooled class ids cand[b] (cnt[b] of them, then padding C), unit rows U (C, d)
and the unit query x_b; the pool is ranked by the cosine
    s_bc = u_c . x_b            (`rerank: cosine`, the paper's re-rank)
or, with the rows' norms, by the response |w_c| u_c . x_b = w_c . x_b / |x_b| (`rerank: inner`, Optimal's
order), and the Q best of each row are the query's selection (Zhang et al. 2018, "Approximated Selection":
the union of the L trees' cells re-ranked, the Q nearest kept).

Scoring: one (B, C) product x U^T read at the pool while C <= DENSE_RATIO P (BLAS does about 30x the rate of
gathered rows), else per query its gathered (cnt_b, d) rows times x_b: on the CPU one query at a time, on a
GPU by chunks of queries, their padded (b, P, d) rows gathered at once and one batched product (a launch per
query made HF-A's 87K-class step 152 ms on the H100, 30x the full softmax's 5 ms, with 4.5 ms of GPU work:
benchmarks/profile_step.py).

`prefilter` k > 0 (not in the paper) ranks the pool from a bfloat16 copy of the rows first (half the bytes
gathered; bfloat16 products) and re-scores only the k Q best of it from the float32 rows. With k = 4 at
10^6 the selections' precision is the exact re-rank's to 3 digits at 15 and 31 rounds, at 0.75 / 0.71 of
its time; 23 rounds reach 0.82 at 0.43 of exact top-k's time (0.75 at 0.28 with 15), and a training step
with 15 rounds is 1.4x faster than with the exact re-rank (studies/hf_prefilter/out/hf_prefilter.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

DENSE_RATIO = 32  # score the pool by one (B, C) product while C <= 32 P: BLAS does 30x the gathers' rate
GATHER_CHUNK = 1 << 26  # elements of the (b, P, d) rows a GPU gathers at once (256 MiB in float32)


def dense(C: int, P: int) -> bool:
    """Score a (B, P) pool by one (B, C) product rather than by gathered rows."""
    return C <= DENSE_RATIO * P


def score(U: torch.Tensor, x: torch.Tensor, cand: torch.Tensor, cnt: torch.Tensor,
          rows: torch.Tensor | None = None) -> torch.Tensor:
    """u_c . x for the (B, P) table of class ids whose row b holds cnt[b] ids, then padding (score 0):
    one (B, C) product when dense, else per query its gathered (cnt_b, d) rows times x (a batched
    (P, d) x (d, 1) product ran 2-4x slower here); `rows` in bfloat16 (a first pass) give bfloat16
    products, 2x faster than float32 rows at 12,500 rows per query. The padding is not gathered: on the
    CPU, index_select of one row repeated (7% of a 20,474-wide table) made the gathers 15x slower.  (B, P)"""
    (B, P), C, rows = cand.shape, len(U), U if rows is None else rows
    if dense(C, P):
        return (x @ U.T).gather(1, cand.clamp(max=C - 1))
    if x.device.type != "cpu":
        return batched(rows, x, cand)
    s = x.new_zeros(B, P)
    for b, k in enumerate(cnt.tolist()):
        s[b, :k] = rows.index_select(0, cand[b, :k]) @ x[b].to(rows.dtype)                     # (cnt_b,)
    return s


def batched(rows: torch.Tensor, x: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    """`score`'s gathered rows for a GPU: per chunk of queries, the (b, P, d) rows of their pools (padding
    gathered as the last row, its score set to 0) times x, in a few launches instead of one per query.  (B, P)"""
    (B, P), C, d = cand.shape, len(rows), rows.shape[1]
    s, b = x.new_zeros(B, P), max(1, GATHER_CHUNK // (P * d))
    for a in range(0, B, b):
        c = cand[a:a + b]                                                                       # (b, P)
        R = rows[c.clamp(max=C - 1)]                                                            # (b, P, d)
        s[a:a + b] = torch.bmm(R, x[a:a + b].to(rows.dtype).unsqueeze(2)).squeeze(2).masked_fill(c == C, 0)
    return s


def ranked(U: torch.Tensor, x: torch.Tensor, cand: torch.Tensor, cnt: torch.Tensor, norms: torch.Tensor | None,
           rows: torch.Tensor | None = None) -> torch.Tensor:
    """What the pool is ranked by: cosines (times the row norms, the response, with `norms`), -inf at
    the padding.  (B, P)"""
    C = len(U)
    s = score(U, x, cand, cnt, rows)
    if norms is not None:
        s = s * norms[cand.clamp(max=C - 1)]
    return s.masked_fill(cand == C, -torch.inf)


def best_of_pool(U: torch.Tensor, x: torch.Tensor, cand: torch.Tensor, cnt: torch.Tensor, Q: int,
                 norms: torch.Tensor | None = None, prefilter: int = 0,
                 low: Callable[[], torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Q best of each query's pool (cand (B, P), padding C last, cnt (B,) real ids per row) as flat
    (query row, class id) pairs by row, and the (B, <= P) ids that were scored exactly. With `prefilter` k
    (where the pool is gathered and holds more than k Q ids), `low()` gives the bfloat16 rows of the
    first pass."""
    C, (B, P) = len(U), cand.shape
    if prefilter and not dense(C, P) and prefilter * Q < P:  # a cheap first pass, then the short list
        val, at = ranked(U, x, cand, cnt, norms, low()).topk(prefilter * Q, dim=1)
        cand = torch.where(torch.isfinite(val), cand.gather(1, at), C).sort(1).values         # (B, k Q), padding last
        cnt = (cand < C).sum(1)
    val, at = ranked(U, x, cand, cnt, norms).topk(min(Q, cand.shape[1]), dim=1)
    keep = torch.isfinite(val)                                                                 # (B, Q)
    rows = torch.arange(B, device=x.device).unsqueeze(1).expand_as(at)
    return rows[keep], cand.gather(1, at)[keep], cand
