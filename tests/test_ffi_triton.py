"""The Triton kernels of the uniform sparse layer against the torch path (itself tested against the
dense matmul in test_sparse.py), float64 at 1e-10. Without a GPU they run in Triton's interpreter."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are decorated (module import)
triton = pytest.importorskip("triton")

from xcbench.sparse import ffi_torch, ffi_triton, uniform  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _case(B, e, m, s, zero_cols, seed=0):
    g = torch.Generator().manual_seed(seed)
    I = uniform.distinct_random_indices(e, s, m, g)                                    # (s, m) int32
    W = torch.randn(s, m, generator=g, dtype=torch.float64)
    x = torch.randn(B, e, generator=g, dtype=torch.float64)
    gr = torch.randn(B, m, generator=g, dtype=torch.float64)
    gr[:, torch.randperm(m, generator=g)[:zero_cols]] = 0                              # skipped labels
    return [t.to(DEV) for t in (I, W, x, gr)]


# B = 70 > the kernel's 32 batch rows per block and m = 300 not a multiple of its 32 labels per block
@pytest.mark.parametrize("B,e,m,s,zero_cols", [(7, 40, 300, 6, 0), (70, 40, 300, 6, 120), (5, 64, 33, 64, 32),
                                               (3, 50, 100, 5, 100)])
def test_triton_kernels_equal_torch_path(B, e, m, s, zero_cols):
    I, W, x, g = _case(B, e, m, s, zero_cols)
    c = torch.randn(m, dtype=torch.float64, device=DEV)
    assert torch.allclose(ffi_triton.ffi_forward(x, W, I, c), ffi_torch.ffi_forward(x, W, I.long(), c), atol=1e-10, rtol=0)
    dx, dW, active = ffi_triton.ffi_backward(g, x, W, I)
    rx, rW, ractive = ffi_torch.ffi_backward(g, x, W, I.long())
    assert torch.equal(active, ractive) and active.numel() == m - zero_cols
    assert torch.allclose(dW, rW, atol=1e-10, rtol=0)
    assert torch.allclose(dx, rx, atol=1e-10, rtol=0)
    dx_none, dW2, _ = ffi_triton.ffi_backward(g, x, W, I, need_x=False)
    assert dx_none is None and torch.allclose(dW2, rW, atol=1e-10, rtol=0)


def test_float32_kernels_match_torch_path():
    I, W, x, g = (t.float() if t.is_floating_point() else t for t in _case(32, 128, 200, 16, 50))
    assert torch.allclose(ffi_triton.ffi_forward(x, W, I), ffi_torch.ffi_forward(x, W, I.long()), atol=1e-5)
    dx, dW, _ = ffi_triton.ffi_backward(g, x, W, I)
    rx, rW, _ = ffi_torch.ffi_backward(g, x, W, I.long())
    assert torch.allclose(dW, rW, atol=1e-4) and torch.allclose(dx, rx, atol=1e-4)


def test_cuda_tensors_use_the_kernels_with_int32_indices():
    fwd, bwd, dtype = uniform.ffi_impl(torch.device("cuda"))
    assert (fwd, bwd, dtype) == (ffi_triton.ffi_forward, ffi_triton.ffi_backward, torch.int32)
    assert uniform.ffi_impl(torch.device("cpu"))[2] == torch.int64
