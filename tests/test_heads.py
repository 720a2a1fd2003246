"""Every registered head: shapes, finite loss and gradients; exact formulas for the dense heads."""

import pytest
import torch
import torch.nn.functional as F

from xcbench.heads.base import multi_hot
from xcbench.registry import HEADS

B, D, C = 6, 5, 11
SMALL = {"uniform_sparse": {"fan_in": 3}, "unstructured_sparse": {"fan_in": 3}}  # fan-in <= D


def _batch(multi: bool):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(B, D, generator=g)
    y = torch.tensor([[1, 3], [0, -1], [10, 2], [4, -1], [5, 6], [-1, -1]]) if multi else torch.randint(0, C, (B,), generator=g)
    return h, y, torch.arange(B)


@pytest.mark.parametrize("name", HEADS.names())
@pytest.mark.parametrize("multi", [False, True])
def test_every_head_interface(name, multi):
    cls = HEADS.get(name)
    if multi and not cls.multi_label:
        pytest.skip("single-label head")
    head = cls(D, C, torch.Generator().manual_seed(1), **SMALL.get(name, {}))
    h, y, idx = _batch(multi)
    head.setup({"label_counts": torch.ones(C, dtype=torch.long), "n_train": 100})
    head.on_epoch_start(0, torch.Generator())
    head.after_step(1, None)
    loss = head.loss(h, y, idx, torch.Generator().manual_seed(2))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    for p in head.parameters():
        assert p.grad is not None
        assert torch.isfinite(p.grad.to_dense() if p.grad.is_sparse else p.grad).all()
    assert head.scores(h).shape == (B, C)


def test_multi_hot():
    y = torch.tensor([[1, 3], [0, -1]])
    assert multi_hot(y, 4).tolist() == [[0, 1, 0, 1], [1, 0, 0, 0]]
    assert multi_hot(torch.tensor([2]), 3).tolist() == [[0, 0, 1]]


def test_full_softmax_formulas():
    head = HEADS.get("full_softmax")(D, C, torch.Generator().manual_seed(1))
    h, y, idx = _batch(False)
    assert torch.allclose(head.loss(h, y, idx, None), F.cross_entropy(head.scores(h), y))
    h, y, idx = _batch(True)
    logp = torch.log_softmax(head.scores(h), 1)
    want = [-(logp[i, [l for l in row if l >= 0]]).mean() for i, row in enumerate(y.tolist()) if max(row) >= 0]
    assert torch.allclose(head.loss(h, y, idx, None), torch.stack(want).mean())


@pytest.mark.parametrize("name", ["full_softmax", "full_chunked"])
def test_full_softmax_bias_starts_at_the_log_prior_only_when_asked(name):
    """`bias_init: log_prior`: b_c = log of the add-one label frequencies, so with h = 0 the loss is the unigram
    model's cross-entropy on the batch, computed here by hand; `zero` leaves b at 0."""
    counts = torch.tensor([40, 9, 0, 3, 7, 1, 0, 2, 5, 1, 12])                         # (C,)
    start = {}
    for init in ("zero", "log_prior"):
        head = HEADS.get(name)(D, C, torch.Generator().manual_seed(0), bias_init=init)
        head.setup({"label_counts": counts, "n_train": 80})
        start[init] = head
    assert torch.equal(start["zero"].b.detach(), torch.zeros(C))
    p = [(n + 1) / (sum(counts.tolist()) + C) for n in counts.tolist()]
    y = torch.tensor([0, 0, 2, 10, 4, 6])
    want = -sum(torch.log(torch.tensor(p[c], dtype=torch.float64)) for c in y.tolist()) / len(y)
    got = start["log_prior"].loss(torch.zeros(len(y), D), y, torch.arange(len(y)), None)
    assert abs(got.item() - want.item()) < 1e-5
    with pytest.raises(ValueError, match="bias_init"):
        HEADS.get(name)(D, C, torch.Generator().manual_seed(0), bias_init="log_noise")


def test_ova_formulas():
    h, y, idx = _batch(True)
    t = multi_hot(y, C)
    sq = HEADS.get("sq_hinge")(D, C, torch.Generator().manual_seed(1))
    o = sq.scores(h)
    want = sum(max(0.0, 1 - (2 * t[i, l].item() - 1) * o[i, l].item()) ** 2 for i in range(B) for l in range(C)) / (B * C)
    assert sq.loss(h, y, idx, None).item() == pytest.approx(want, rel=1e-5)
    bce = HEADS.get("bce")(D, C, torch.Generator().manual_seed(1))
    o = bce.scores(h)
    want = (F.softplus(o) - t * o).mean()
    assert bce.loss(h, y, idx, None).item() == pytest.approx(want.item(), rel=1e-5)


@pytest.mark.parametrize("B, C, scale", [(3, 7, 1.0), (37, 501, 0.3), (64, 4099, 3.0)])
@pytest.mark.parametrize("upstream", [1.0, 0.37])
@pytest.mark.parametrize("column_major", [False, True])
def test_fused_squared_hinge_is_bit_identical_to_autograds_chain(B, C, scale, upstream, column_major):
    """The squared hinge's own backward gives the loss and gradient that autograd's chain of element-wise ops
    gave, bit for bit (kept runs reproduce), including entries exactly on the margin, a scaled incoming gradient
    and the column-major scores of the sparse layer."""
    from xcbench.heads.ova import sq_hinge_loss

    g = torch.Generator().manual_seed(C)
    o = torch.randn(B, C, generator=g) * scale
    o[0, :3] = torch.tensor([1.0, -1.0, 0.0])                                   # on the margin for either target
    t = multi_hot(torch.randint(-1, C, (B, 4), generator=g), C)
    o_ref, o_new = o.clone().requires_grad_(), o.clone().requires_grad_()
    if column_major:                                                             # (B, C) views of (C, B) storage
        o_ref, o_new = (x.detach().T.contiguous().requires_grad_() for x in (o_ref, o_new))
        s_ref, s_new = o_ref.T, o_new.T
    else:
        s_ref, s_new = o_ref, o_new
    want = torch.relu(1 - (2 * t - 1) * s_ref).square().mean()
    got = sq_hinge_loss(s_new, t)
    (upstream * want).backward()
    (upstream * got).backward()
    assert torch.equal(got, want)
    assert torch.equal(o_new.grad, o_ref.grad)
    assert (o_new.grad != 0).any() and (o_new.grad == 0).any()


def test_full_softmax_masked_other_positives_against_brute_force():
    """`other_positives: masked`: each listed positive l of a row against the row's negatives alone,
    -log(e^{o_l} / (e^{o_l} + sum_{c not a positive} e^{o_c})), averaged over the row's positives, then over the rows
    with a label; equal to the default on rows with one label, lower where a row has several (its other positives
    leave the denominator); single-label targets unchanged."""
    from xcbench.heads.full_softmax import softmax_ce

    g = torch.Generator().manual_seed(5)
    B, C = 7, 11
    o = torch.randn(B, C, generator=g, dtype=torch.float64)
    y = torch.tensor([[3, 5, 9], [2, -1, -1], [-1, -1, -1], [0, 1, -1], [4, 4, 6], [10, -1, 7], [8, 2, 1]])
    rows = []
    for i in range(B):
        pos = [int(v) for v in y[i] if v >= 0]
        if not pos:
            continue
        neg = [c for c in range(C) if c not in pos]
        rows.append(sum(-(o[i, l] - torch.logsumexp(torch.cat([o[i, [l]], o[i, neg]]), 0)) for l in pos) / len(pos))
    assert torch.allclose(softmax_ce(o, y, "masked"), torch.stack(rows).mean(), atol=1e-12)
    one = y[[1, 5]].clone()
    one[1] = torch.tensor([10, -1, -1])
    assert torch.allclose(softmax_ce(o[[1, 5]], one, "masked"), softmax_ce(o[[1, 5]], one), atol=1e-12)
    assert softmax_ce(o, y, "masked") < softmax_ce(o, y)
    y1 = torch.randint(0, C, (B,), generator=g)
    assert torch.equal(softmax_ce(o, y1, "masked"), softmax_ce(o, y1))
    head = HEADS.get("full_softmax")(3, C, torch.Generator().manual_seed(0), other_positives="masked")
    h = torch.randn(B, 3, generator=g)
    assert torch.allclose(head.loss(h, y, torch.arange(B), None), softmax_ce(head.scores(h), y, "masked"))
    with pytest.raises(ValueError, match="other_positives"):
        HEADS.get("full_softmax")(3, C, torch.Generator().manual_seed(0), other_positives="drop")


@pytest.mark.parametrize("multi", [False, True])
@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_full_chunked_equals_full_softmax_loss_and_gradients(multi, chunk):
    """Class-chunked online log-sum-exp: the same loss and the same gradients of h, W and b as the
    materialised full softmax, single- and multi-label (a row without labels skipped), any chunk size."""
    from xcbench.heads.full_softmax import softmax_ce

    g = torch.Generator().manual_seed(3)
    B, d, C = 9, 5, 53
    h = torch.randn(B, d, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, C, (B,), generator=g)
    if multi:
        y = torch.randint(0, C, (B, 4), generator=g)
        y[torch.rand(B, 4, generator=g) < 0.4] = -1
        y[2] = -1  # a row without labels
    heads = [HEADS.get(name)(d, C, torch.Generator().manual_seed(0), **kw)
             for name, kw in (("full_softmax", {}), ("full_chunked", {"chunk": chunk}))]
    for hd in heads:
        hd.double()
        with torch.no_grad():
            hd.b.copy_(torch.randn(C, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    grads = []
    for hd in heads:
        h.grad = None
        loss = hd.loss(h, y, torch.arange(B), None)
        loss.backward()
        grads.append((loss.detach(), h.grad.clone(), hd.W.grad.clone(), hd.b.grad.clone()))
    assert torch.allclose(grads[0][0], softmax_ce(heads[0].scores(h), y))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_row_dots_equal_autograds_bmm_bit_for_bit(sparse):
    """The sampled head's dots h . E_s and both gradients, against the bmm they replace (its backward returned
    the rows' gradient transposed, copied at 42 ms a step), on dense and sparse embedding gradients."""
    from xcbench.heads.sampled_softmax import RowDots

    g = torch.Generator().manual_seed(0)
    E0, h0 = torch.randn(50, 24, generator=g), torch.randn(9, 24, generator=g)
    ids, w = torch.randint(0, 50, (9, 13), generator=g), torch.randn(9, 13, generator=g)
    out = []
    for new in (False, True):
        E, h = E0.clone().requires_grad_(True), h0.clone().requires_grad_(True)
        E_s = F.embedding(ids, E, sparse=sparse)
        dots = RowDots.apply(h.unsqueeze(1), E_s) if new else (h.unsqueeze(1) @ E_s.transpose(1, 2)).squeeze(1)
        (dots * w).sum().backward()
        out.append((dots.detach(), E.grad.to_dense() if sparse else E.grad, h.grad))
    for a, b in zip(*out):
        assert torch.equal(a, b)


@pytest.mark.parametrize("sparse", [False, True])
def test_sampled_dots_equal_their_sums_with_repeated_classes(sparse):
    """SampledDots (`logits: sparse`) against the definition, in float64: o_bj = h_b . e_s_bj, dL/dh_b =
    sum_j g_bj e_s_bj, dL/de_c = sum over (b, j) with s_bj = c of g_bj h_b. Row 0 draws class 3 three times
    and class 5 twice, so a repeat's gradient left out of its pair's sum shows; with `sparse` E's gradient
    comes as the coalesced rows of every drawn class, nothing else."""
    from xcbench.heads.row_dots import SampledDots

    g = torch.Generator().manual_seed(0)
    n, d = 30, 5
    E0, h0 = torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(6, d, generator=g, dtype=torch.float64)
    ids, w = torch.randint(0, n, (6, 8), generator=g), torch.randn(6, 8, generator=g, dtype=torch.float64)
    ids[0] = torch.tensor([3, 3, 7, 3, 5, 0, 5, 29])
    E, h = E0.clone().requires_grad_(True), h0.clone().requires_grad_(True)
    dots = SampledDots.apply(h, E, ids, sparse)
    (dots * w).sum().backward()
    torch.testing.assert_close(dots, (h0.unsqueeze(1) * E0[ids]).sum(-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(h.grad, (w.unsqueeze(2) * E0[ids]).sum(1), rtol=0, atol=1e-12)
    want_E = torch.zeros(n, d, dtype=torch.float64)
    for b in range(6):
        for j in range(8):
            want_E[ids[b, j]] += w[b, j] * h0[b]
    torch.testing.assert_close(E.grad.to_dense(), want_E, rtol=0, atol=1e-12)
    if sparse:
        assert E.grad.is_sparse
        assert torch.equal(E.grad.coalesce().indices()[0], torch.unique(ids))


@pytest.mark.parametrize("tau", [1.0, 2.5])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("absolute", [False, True])
def test_normalized_softmax_scores_and_loss_follow_their_formula(tau, normalize, absolute):
    """scores = tau f(u(h) . u(E)^T), f = |.| when absolute, u = L2 normalisation when normalize; the loss is
    the mean cross-entropy of those scores. tau = 1 skips the product: the same bits, loss and gradients."""
    head = HEADS.get("normalized_softmax")(D, C, torch.Generator().manual_seed(1), tau=tau, normalize=normalize,
                                           absolute=absolute)
    h, y, idx = _batch(False)
    h.requires_grad_(True)
    unit = (lambda z: F.normalize(z, dim=-1)) if normalize else (lambda z: z)
    dot = unit(h) @ unit(head.E).T
    want = tau * (dot.abs() if absolute else dot)
    loss = head.loss(h, y, idx, torch.Generator())
    ref = F.cross_entropy(want, y)
    assert torch.equal(head.scores(h), want)
    torch.testing.assert_close(loss, ref)
    assert torch.equal(*(torch.autograd.grad(v, (h, head.E), retain_graph=True)[0] for v in (
        loss, -torch.log_softmax(want, 1).gather(1, y[:, None]).mean())))


@pytest.mark.parametrize("kw", [{"normalize": False}, {"normalize": True, "tau": 2.5}])
@pytest.mark.parametrize("multilabel", [False, True])
def test_normalized_softmax_chunked_equals_its_materialised_loss(kw, multilabel):
    """`chunk`: the loss over chunks of classes (no (B, n) logits) equals the materialised one, with both gradients,
    at a chunk that leaves a short last chunk (n = 50, chunk 16: 16 + 16 + 16 + 2), so a class dropped from the
    last chunk or a chunk's rows left out of the gradient shows."""
    g, n = torch.Generator().manual_seed(4), 50
    y = torch.randint(-1, n, (9, 3), generator=g) if multilabel else torch.randint(0, n, (9,), generator=g)
    if multilabel:
        y[:, 0] = y[:, 0].clamp(min=0)
    y[0] = n - 1  # a target in the short last chunk
    h0 = torch.randn(9, D, generator=g)
    out = []
    for chunk in (None, 16):
        head = HEADS.get("normalized_softmax")(D, n, torch.Generator().manual_seed(1), chunk=chunk, **kw)
        h = h0.clone().requires_grad_(True)
        loss = head.loss(h, y, None, torch.Generator())
        out.append((loss.detach(), *torch.autograd.grad(loss, (h, head.E))))
    for a, b in zip(*out):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="absolute"):
        HEADS.get("normalized_softmax")(D, n, torch.Generator(), absolute=True, chunk=16)


@pytest.mark.parametrize("kw", [{"sparse_grad": True}, {"sparse_grad": False},
                                {"sparse_grad": True, "normalize": True, "tau": 5.0}, {"sparse_grad": True, "absolute": True},
                                {"sparse_grad": True, "correct": "both"}])
@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("route", ["all", "sparse"])
def test_sampled_softmax_all_and_sparse_logits_equal_the_gathers(kw, multilabel, route):
    """`logits: all` (one product with every class row, then each row's 1 + m picked) and `logits: sparse` (the
    sampled product over the draws' sparse pattern) give the gather's loss and gradients to rounding, E's gradient
    as the same sparse rows (hits included: zero-valued rows a lazy optimizer still steps), and one lazy-Adam step
    moves E alike. 30 draws from 400 classes repeat a class within a row in most rows."""
    from xcbench.optim.lazy_adam import LazyAdam

    g, n = torch.Generator().manual_seed(2), 400  # 240 draws leave most classes, and some targets, undrawn
    y = torch.randint(-1, n, (8, 3), generator=g) if multilabel else torch.randint(0, n, (8,), generator=g)
    if multilabel:
        y[:, 0] = y[:, 0].clamp(min=0)
    h0 = torch.randn(8, 6, generator=g)
    out = []
    for logits in ("gather", route):
        head = HEADS.get("sampled_softmax")(6, n, torch.Generator().manual_seed(0), m=30, logits=logits, **kw)
        h = h0.clone().requires_grad_(True)
        loss = head.loss(h, y, None, torch.Generator().manual_seed(3))
        loss.backward()
        gE = head.E.grad
        out.append((loss.detach(), h.grad, gE.to_dense(), gE.coalesce().indices() if gE.is_sparse else gE.ne(0).any(1)))
        LazyAdam([head.E], lr=0.1).step()
        out[-1] += (head.E.detach(),)
    (l0, gh0, gE0, rows0, E0), (l1, gh1, gE1, rows1, E1) = out
    torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gh1, gh0, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(gE1, gE0, rtol=1e-4, atol=1e-6)
    assert torch.equal(rows1, rows0)
    torch.testing.assert_close(E1, E0, rtol=1e-5, atol=1e-6)


def test_sampled_softmax_refuses_an_unknown_logits_route_and_is_not_captured_with_sparse_rows():
    make = HEADS.get("sampled_softmax")
    assert make(6, 40, torch.Generator(), logits="all").graph_safe  # no torch.unique in the step
    assert not make(6, 40, torch.Generator(), logits="all", sparse_grad=True).graph_safe
    assert not make(6, 40, torch.Generator(), logits="sparse").graph_safe
    with pytest.raises(ValueError, match="logits must be one of"):
        make(6, 40, torch.Generator().manual_seed(0), logits="dense")
