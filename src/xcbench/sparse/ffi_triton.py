"""Triton kernels of the uniform (fixed fan-in) sparse layer: the GPU path of sparse/uniform.py.

Schultheis & Babbar (ECML-PKDD 2023), section 4, Algorithms 1-3, with indices I (s, m) int32 and
weights W (s, m) (uniform.py states the equations). The batch is kept transposed, x^T (e, B) and
g^T (m, B), so that the gather of one input row reads B contiguous values.
  _ffi_fwd:  one program per (block of BL labels, block of BB batch rows):
             o^T[l, b] = sum_k W[k, l] x^T[I[k, l], b]              (Alg. 1; bias added outside)
  _ffi_bwd:  one program per block of BL *active* labels (labels whose column of g is not all
             zero; the others are skipped, implicit negative mining):
             dW[k, l]          = sum_b g^T[l, b] x^T[I[k, l], b]     (Alg. 3)
             dx^T[I[k, l], b] += g^T[l, b] W[k, l]                   (Alg. 2, atomic adds)
The atomic scatter of Alg. 2 sums in a hardware-dependent order, so dx agrees with the torch path
to float tolerance, not bit for bit. The torch path (uniform.py) is the reference and the CPU
implementation; tests run these kernels in Triton's interpreter (TRITON_INTERPRET=1) on the CPU
against it, in float64. Importing this module needs `triton` (shipped with CUDA builds of torch).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from xcbench.sparse.ffi_torch import active_labels

BL, BB = 32, 32  # labels and batch rows per program


@triton.jit
def _ffi_fwd(xT, W, I, oT, m, B, s, BL: tl.constexpr, BB: tl.constexpr):
    l = tl.program_id(0) * BL + tl.arange(0, BL)                                        # (BL,)
    b = tl.program_id(1) * BB + tl.arange(0, BB)                                        # (BB,)
    lm, bm = l < m, b < B
    mask = lm[:, None] & bm[None, :]
    acc = tl.zeros((BL, BB), dtype=oT.dtype.element_ty)
    for k in range(0, s):
        i = tl.load(I + k * m + l, mask=lm, other=0).to(tl.int64)                       # (BL,)
        w = tl.load(W + k * m + l, mask=lm, other=0.0)                                  # (BL,)
        xv = tl.load(xT + i[:, None] * B + b[None, :], mask=mask, other=0.0)            # (BL, BB)
        acc += w[:, None] * xv
    tl.store(oT + l[:, None] * B + b[None, :], acc, mask=mask)


@triton.jit
def _ffi_bwd(xT, gT, W, I, L, dW, dxT, a, m, B, s, NEED_X: tl.constexpr, BL: tl.constexpr, BB: tl.constexpr):
    j = tl.program_id(0) * BL + tl.arange(0, BL)                                        # (BL,) into L
    jm = j < a
    l = tl.load(L + j, mask=jm, other=0)                                                # (BL,) label ids
    for k in range(0, s):
        i = tl.load(I + k * m + l, mask=jm, other=0).to(tl.int64)                       # (BL,)
        w = tl.load(W + k * m + l, mask=jm, other=0.0)                                  # (BL,)
        dw = tl.zeros((BL,), dtype=dW.dtype.element_ty)
        for b0 in range(0, B, BB):
            b = b0 + tl.arange(0, BB)
            mask = jm[:, None] & (b < B)[None, :]
            gv = tl.load(gT + l[:, None] * B + b[None, :], mask=mask, other=0.0)        # (BL, BB)
            xv = tl.load(xT + i[:, None] * B + b[None, :], mask=mask, other=0.0)        # (BL, BB)
            dw += tl.sum(gv * xv, axis=1)
            if NEED_X:
                tl.atomic_add(dxT + i[:, None] * B + b[None, :], gv * w[:, None], mask=mask)
        tl.store(dW + k * m + l, dw, mask=jm)


def ffi_forward(x: torch.Tensor, W: torch.Tensor, I: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
    """o = x W_sparse + c, as ffi_torch.ffi_forward; I int32 (s, m)."""
    xT = x.T.contiguous()                                                               # (e, B)
    (s, m), B = W.shape, x.shape[0]
    oT = torch.empty(m, B, dtype=x.dtype, device=x.device)                              # (m, B)
    grid = (triton.cdiv(m, BL), triton.cdiv(B, BB))
    _ffi_fwd[grid](xT, W.contiguous(), I.contiguous(), oT, m, B, s, BL=BL, BB=BB)
    return oT.T if c is None else oT.T + c


def ffi_backward(g: torch.Tensor, x: torch.Tensor, W: torch.Tensor, I: torch.Tensor,
                 need_x: bool = True) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(dx, dW, active labels), as ffi_torch.ffi_backward."""
    active = active_labels(g)                                                           # (a,)
    xT, gT = x.T.contiguous(), g.T.contiguous()                                         # (e, B), (m, B)
    (s, m), B = W.shape, x.shape[0]
    dW = torch.zeros_like(W)
    dxT = torch.zeros_like(xT) if need_x else xT  # without NEED_X the kernel never touches it
    if active.numel():
        grid = (triton.cdiv(active.numel(), BL),)
        _ffi_bwd[grid](xT, gT, W.contiguous(), I.contiguous(), active, dW, dxT, active.numel(), m, B, s,
                       NEED_X=need_x, BL=BL, BB=BB)
    return (dxT.T if need_x else None), dW, active
