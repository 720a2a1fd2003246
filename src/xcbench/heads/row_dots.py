"""The dot products of a sampled head: each query h_b against its own k class rows s_b1..s_bk of E,

    o_bj = h_b . e_{s_bj}          h (B, d), E (n, d), ids s (B, k)  ->  o (B, k),
    dL/dh_b = sum_j g_bj e_{s_bj},   dL/de_c = sum_{(b, j): s_bj = c} g_bj h_b,

computed three ways (heads/sampled_softmax.py `logits`), all the same sums:

- `RowDots` (gather): E_s = E[s] (B, k, d) materialised, then batched products. Moves B k d floats four
  times (gather, dots, both backward products) and coalesces E's gradient from a (B, k, d) tensor.
- `SparseRows` (all): one (B, d) x (d, n) product with every class row, each row's k picked; hands E's
  dense gradient on as the sparse rows a lazy optimizer steps.
- `SampledDots` (sparse): the ids as a sparse (B, n) pattern G with one entry per distinct (b, c) pair. Forward
  is the sampled dense-dense product (torch.sparse.sampled_addmm) at those entries only; backward is two
  sparse-dense products, dL/dh = G E (pattern in CSR) and dL/dE = G^T h (the pattern sorted by class),
  with the gradients of repeated draws of one class in a row summed into their pair's entry first.
  B k d multiply-adds each way and no (B, k, d) tensor. The output layer's step (with lazy Adam) on one CPU
  thread at PTB's B = 700, m = 100, d = 200: 74 ms against the gather's 132 (benchmarks/out/sampled_logits_ptb.md);
  at B = 256, d = 128 (sampled_logits.md) about the gather's time up to B m = 4 n, 2.3x less at 7.7 n, and the
  all-class product's time at 19 n, where the gather takes 3.5x longer.
"""

from __future__ import annotations

import warnings

import torch


class RowDots(torch.autograd.Function):
    """dots (B, k) = h (B, 1, d) . E_s (B, k, d), computed as torch.bmm(h, E_s^T) computes them (the same
    products, bit for bit), with a backward that writes the rows' gradient g_bk h_b in E_s's own layout.
    Autograd's bmm backward returns it transposed, and making it contiguous for the embedding's backward
    took 42 of a 74-ms step at B = 256, m = 100, d = 128 on one CPU thread (xcbench/faces quick). The
    outer product is a bmm with an inner size of 1 (exact products), 9x faster there than a broadcast mul."""

    @staticmethod
    def forward(ctx, h, E_s):
        ctx.save_for_backward(h, E_s)
        return torch.bmm(h, E_s.transpose(1, 2)).squeeze(1)                                   # (B, k)

    @staticmethod
    def backward(ctx, g):
        h, E_s = ctx.saved_tensors
        g = g.unsqueeze(1)                                                                    # (B, 1, k)
        g_h = torch.bmm(g, E_s) if ctx.needs_input_grad[0] else None                          # (B, 1, d)
        g_E = torch.bmm(g.transpose(1, 2), h) if ctx.needs_input_grad[1] else None            # (B, k, d)
        return g_h, g_E


class SparseRows(torch.autograd.Function):
    """E itself forward; backward, E's dense gradient (n, d) handed on as the sparse rows `rows` (sorted, unique:
    already coalesced), the layout `F.embedding(sparse=True)` gives. Rows outside `rows` must have zero gradient."""

    @staticmethod
    def forward(ctx, E, rows):
        ctx.rows = rows
        return E.view_as(E)

    @staticmethod
    def backward(ctx, g):
        return _sparse_rows(ctx.rows, g[ctx.rows], g.shape), None


class SampledDots(torch.autograd.Function):
    """o (B, k) = h_b . E[ids_bj] through the sparse (B, n) pattern of the distinct (row, class) pairs (module
    docstring). `sparse_grad`: E's gradient as the sparse rows of the drawn classes (every drawn class, also one
    whose gradient sums to zero), as `F.embedding(sparse=True)` hands it on; else dense (n, d)."""

    @staticmethod
    def forward(ctx, h, E, ids, sparse_grad: bool = False):
        (B, k), n = ids.shape, E.shape[0]
        rows = torch.arange(B, device=ids.device).unsqueeze(1)                               # (B, 1)
        pairs, inv = torch.unique((rows * n + ids).reshape(-1), return_inverse=True)         # (P,), (B k,): sorted
        r, c = pairs // n, pairs % n                                                         # (P,) row-major order
        crow = _offsets(torch.bincount(r, minlength=B))                                      # (B + 1,)
        pattern = _csr(crow, c, torch.zeros(len(pairs), dtype=h.dtype, device=h.device), (B, n))
        o = torch.sparse.sampled_addmm(pattern, h, E.T, beta=0.0).values()                   # (P,)
        ctx.save_for_backward(h, E, inv, r, c, crow)
        ctx.sparse_grad = sparse_grad
        return o[inv].view(B, k)                                                             # (B, k)

    @staticmethod
    def backward(ctx, g):
        h, E, inv, r, c, crow = ctx.saved_tensors
        (B, n), P = (h.shape[0], E.shape[0]), len(r)
        G = torch.zeros(P, dtype=g.dtype, device=g.device).index_add_(0, inv, g.reshape(-1))  # (P,): repeats summed
        g_h = g_E = None
        if ctx.needs_input_grad[0]:
            g_h = _csr(crow, c, G, (B, n)) @ E                                               # (B, d)
        if ctx.needs_input_grad[1]:
            by_class = torch.argsort(c, stable=True)                                         # (P,): class-major
            drawn, counts = torch.unique_consecutive(c[by_class], return_counts=True)       # (U,), (U,)
            g_U = _csr(_offsets(counts), r[by_class], G[by_class], (len(drawn), B)) @ h       # (U, d): drawn rows
            if ctx.sparse_grad:
                g_E = _sparse_rows(drawn, g_U, E.shape)
            else:
                g_E = torch.zeros_like(E).index_copy_(0, drawn, g_U)                         # (n, d)
        return g_h, g_E, None, None


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    """CSR row offsets (R + 1,) of entries sorted by row, from each row's count (R,)."""
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)])


def _sparse_rows(rows: torch.Tensor, values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The gradient of a class table as the rows `rows` (sorted, unique: already coalesced) holding `values`, the
    layout `F.embedding(sparse=True)` hands on."""
    return torch.sparse_coo_tensor(rows.unsqueeze(0), values, shape, is_coalesced=True, check_invariants=False)


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple) -> torch.Tensor:
    """A CSR matrix from indices built valid here (rows' offsets ascending, columns in range): torch's checks off."""
    with warnings.catch_warnings():  # torch warns once that CSR support is in beta
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)
