"""Sparse last layers against the dense matmul with the same masked weights (float64)."""

import pytest
import torch

from xcbench.heads.sparse_ova import UniformSparse, UnstructuredSparse
from xcbench.sparse.ffi_torch import ffi_backward
from xcbench.sparse.rewire import regrow_fixed_fan_in, smallest
from xcbench.sparse.uniform import distinct_random_indices, ffi_linear
from xcbench.sparse.unstructured import coo_linear, random_positions

E, M, S, B = 40, 300, 6, 7


def _dense_from_ffi(W, I, e):
    D = torch.zeros(e, W.shape[1], dtype=W.dtype)
    D.index_put_((I.long(), torch.arange(W.shape[1]).expand_as(I)), W, accumulate=True)
    return D


def _setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    I = distinct_random_indices(E, S, M, g)
    W = torch.randn(S, M, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(M, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(B, E, generator=g, dtype=torch.float64, requires_grad=True)
    return I, W, c, x


@pytest.mark.parametrize("zero_cols", [0, 120, 299])
def test_uniform_forward_and_grads_equal_dense(zero_cols):
    I, W, c, x = _setup()
    g = torch.randn(B, M, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    g[:, torch.randperm(M, generator=torch.Generator().manual_seed(6))[:zero_cols]] = 0  # skipped labels
    out = ffi_linear(x, W, c, I)
    D = _dense_from_ffi(W, I, E)
    ref = x @ D + c
    assert torch.allclose(out, ref, atol=1e-10, rtol=0)
    dx, dW, dc = torch.autograd.grad(out, (x, W, c), g)
    Wd = W.detach().clone().requires_grad_(True)
    Dd = _dense_from_ffi(Wd, I, E)
    xd = x.detach().clone().requires_grad_(True)
    rx, rW, rc = torch.autograd.grad(xd @ Dd + c, (xd, Wd, c), g)
    assert torch.allclose(dx, rx, atol=1e-10, rtol=0)
    assert torch.allclose(dW, rW, atol=1e-10, rtol=0)
    assert torch.allclose(dc, rc, atol=1e-10, rtol=0)
    _, _, active = ffi_backward(g, x.detach(), W.detach(), I)
    assert active.numel() == M - zero_cols


def test_uniform_forward_without_bias_equals_dense():
    """The torch kernel's output without a bias (the Triton kernels' reference)."""
    from xcbench.sparse.ffi_torch import ffi_forward

    I, W, c, x = _setup(2)
    out = ffi_forward(x.detach(), W.detach(), I.long())
    assert torch.allclose(out, x.detach() @ _dense_from_ffi(W.detach(), I, E), atol=1e-10, rtol=0)


def test_distinct_indices_per_label():
    I = distinct_random_indices(E, S, M, torch.Generator().manual_seed(0))
    assert I.dtype == torch.int32 and I.shape == (S, M)
    assert all(len(set(I[:, l].tolist())) == S for l in range(M))
    assert int(I.min()) >= 0 and int(I.max()) < E


def test_unstructured_equals_dense():
    g = torch.Generator().manual_seed(0)
    rows, cols = random_positions(E, M, S * M, g)
    assert rows.dtype == torch.int32 and len(set(zip(rows.tolist(), cols.tolist()))) == S * M
    v = torch.randn(S * M, dtype=torch.float64, generator=g, requires_grad=True)
    c = torch.randn(M, dtype=torch.float64, generator=g, requires_grad=True)
    x = torch.randn(B, E, dtype=torch.float64, generator=g, requires_grad=True)
    out = coo_linear(x, v, c, rows, cols, M)
    vd = v.detach().clone().requires_grad_(True)
    xd = x.detach().clone().requires_grad_(True)
    D = torch.zeros(E, M, dtype=torch.float64).index_put((rows.long(), cols.long()), vd, accumulate=True)
    ref = xd @ D + c
    assert torch.allclose(out, ref, atol=1e-10, rtol=0)
    gout = torch.randn(B, M, dtype=torch.float64, generator=g)
    a = torch.autograd.grad(out, (x, v), gout)
    b = torch.autograd.grad(ref, (xd, vd), gout)
    assert all(torch.allclose(p, q, atol=1e-10, rtol=0) for p, q in zip(a, b))


def test_rewiring_keeps_fan_in_no_duplicates_and_resets_moments():
    head = UniformSparse(E, M, torch.Generator().manual_seed(0), fan_in=S, rewire_interval=1, rewire_fraction=0.2)
    opt = torch.optim.Adam(head.parameters(), lr=0.1)
    x = torch.randn(B, E)
    y = torch.randint(0, M, (B, 2))
    head.loss(x, y, None, None).backward()
    opt.step()
    I0 = head.I.clone()
    moved = smallest(head.W, 0.2)
    assert moved.numel() == round(0.2 * S * M)
    head.after_step(1, opt)
    changed = (head.I != I0).flatten().nonzero().squeeze(1)
    assert set(changed.tolist()) <= set(moved.tolist()) and changed.numel() > 0.8 * moved.numel()
    for l in range(M):
        assert len(set(head.I[:, l].tolist())) == S
    st = opt.state[head.W]
    assert (st["exp_avg"].view(-1)[moved] == 0).all() and (st["exp_avg_sq"].view(-1)[moved] == 0).all()
    keep = torch.ones(S * M, dtype=torch.bool)
    keep[moved] = False
    assert (st["exp_avg_sq"].view(-1)[keep] != 0).any()


def test_regrow_avoids_existing_inputs_in_tight_columns():
    I = torch.arange(5, dtype=torch.int32).unsqueeze(1).repeat(1, 50)  # every label uses inputs 0..4 of 6
    flat = torch.arange(0, 250, 3)
    regrow_fixed_fan_in(I, flat, 6, torch.Generator().manual_seed(0))
    for l in range(50):
        assert len(set(I[:, l].tolist())) == 5


def test_unstructured_rewire_moves_the_smallest_weights_to_new_free_positions():
    head = UnstructuredSparse(E, M, torch.Generator().manual_seed(0), fan_in=S, rewire_interval=1, rewire_fraction=0.2)
    opt = torch.optim.Adam(head.parameters(), lr=0.1)
    head.loss(torch.randn(B, E), torch.randint(0, M, (B, 2)), None, None).backward()
    opt.step()
    before = list(zip(head.rows.tolist(), head.cols.tolist()))
    v0, moved = head.v.detach().clone(), smallest(head.v, 0.2)
    head.after_step(1, opt)
    after = list(zip(head.rows.tolist(), head.cols.tolist()))
    assert len(set(after)) == S * M                                   # positions stay distinct
    changed = {i for i in range(S * M) if after[i] != before[i]}
    # only the smallest |v| move, nearly all of them (a freed position may be drawn again) ...
    assert changed <= set(moved.tolist()) and len(changed) >= 0.9 * moved.numel()
    kept = {before[i] for i in range(S * M) if i not in set(moved.tolist())}
    assert not {after[i] for i in changed} & kept                     # ... never onto a kept position
    assert torch.equal(head.v.detach(), v0)                           # values kept
    assert (opt.state[head.v]["exp_avg"][moved] == 0).all()           # their moments reset


def test_distinct_indices_dense_regime():
    I = distinct_random_indices(10, 6, 50, torch.Generator().manual_seed(0))
    assert all(len(set(I[:, l].tolist())) == 6 for l in range(50))


def test_squared_hinge_skips_labels_and_reports_share():
    head = UniformSparse(E, M, torch.Generator().manual_seed(0), fan_in=S)
    with torch.no_grad():
        head.c.fill_(-5.0)  # every negative margin is met: only the positives' labels back-propagate
    y = torch.tensor([[3, 7]] * B)
    head.loss(torch.randn(B, E), y, None, None).backward()
    assert head.report()["backprop_label_share"] == pytest.approx(2 / M)


def test_full_fan_in_with_rewiring_is_refused():
    with pytest.raises(ValueError, match="no free input"):
        UniformSparse(8, 20, torch.Generator().manual_seed(0), fan_in=8)
    UniformSparse(8, 20, torch.Generator().manual_seed(0), fan_in=8, rewire_interval=0)  # dense per label: fine


def test_uniform_label_chunking_does_not_change_results(monkeypatch):
    import xcbench.sparse.ffi_torch as U

    I, W, c, x = _setup(1)
    g = torch.randn(B, M, dtype=torch.float64)
    g[:, ::3] = 0
    full = U.ffi_forward(x.detach(), W.detach(), I.long(), c.detach())
    dx, dW, _ = U.ffi_backward(g, x.detach(), W.detach(), I.long())
    monkeypatch.setattr(U, "label_chunk", lambda batch, budget=0: 7)  # 300 labels in chunks of 7
    assert torch.allclose(U.ffi_forward(x.detach(), W.detach(), I.long(), c.detach()), full, atol=1e-12)
    dx7, dW7, _ = U.ffi_backward(g, x.detach(), W.detach(), I.long())
    assert torch.allclose(dx7, dx, atol=1e-12) and torch.allclose(dW7, dW, atol=1e-12)
