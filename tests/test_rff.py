"""RF-softmax pieces: kernel maps, tree descent paths, sparse-row training, lazy Adam, the LM task,
the probes of Tables 1-2."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import make_test_task

from xcbench.heads.sampled_softmax import pick_one_positive
from xcbench.optim.weights import clip_grad_norm
from xcbench.registry import HEADS, OPTIMIZERS, SAMPLERS


def _unit(n, d, seed):
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), dim=1)


def test_random_maclaurin_is_unbiased_for_exp_kernel():
    x, y = _unit(40, 8, 0), _unit(40, 8, 1)
    target = torch.exp(2.0 * (x * y).sum(1))
    errs = {}
    for D in (500, 50000):
        s = SAMPLERS.get("random_maclaurin")(1, D=D, tau=2.0)
        errs[D] = ((s.phi(x) * s.phi(y)).sum(1) - target).square().mean().item()
    assert errs[50000] < errs[500] / 10 and errs[50000] < 0.05


def test_rff_times_e_tau_estimates_exponential_kernel_on_unit_vectors():
    x, y = _unit(50, 8, 2), _unit(50, 8, 3)
    s = SAMPLERS.get("rff")(1, D=50000, nu=1.5)
    est = math.exp(1.5) * (s.phi(x) * s.phi(y)).sum(1)
    assert (est - torch.exp(1.5 * (x * y).sum(1))).abs().max() < 0.1


@pytest.mark.parametrize("name", ["quadratic", "rff", "random_maclaurin"])
def test_dense_and_gathered_tree_levels_agree(name):
    """Levels computed by one matmul over all nodes and by per-draw gathers give the same draws."""
    n, d = 300, 5
    E = _unit(n, d, 4).float()
    h = _unit(7, d, 5).float()
    kw = {"D": 32} if name != "quadratic" else {}
    a, b = SAMPLERS.get(name)(n, dense_nodes=1, **kw), SAMPLERS.get(name)(n, dense_nodes=1 << 20, **kw)
    a.update(E, None)
    b.update(E, None)
    ia, la = a.sample(h, 50, torch.Generator().manual_seed(0))
    ib, lb = b.sample(h, 50, torch.Generator().manual_seed(0))
    assert torch.equal(ia, ib) and torch.allclose(la.exp(), lb.exp(), atol=1e-6)
    ids = torch.arange(n).expand(7, -1)
    assert torch.allclose(a.log_prob(h, ids).exp(), b.log_prob(h, ids).exp(), atol=1e-6)


def _head(sparse, sampler="rff", **kw):
    return HEADS.get("sampled_softmax")(6, 50, torch.Generator().manual_seed(0), sampler=sampler, m=10, tau=5.0,
                                        normalize=True, sparse_grad=sparse,
                                        sampler_params={"D": 16} if sampler == "rff" else None, **kw)


def test_sparse_row_gradient_equals_dense_gradient():
    h = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 50, (8,), generator=torch.Generator().manual_seed(2))
    grads = []
    for sparse in (False, True):
        head = _head(sparse)
        head.on_epoch_start(0, torch.Generator())
        loss = head.loss(h, y, None, torch.Generator().manual_seed(3))
        loss.backward()
        g = head.E.grad
        assert g.is_sparse == sparse
        grads.append((loss.item(), g.to_dense() if sparse else g))
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-6)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-6)
    assert (grads[0][1].abs().sum(1) > 0).sum() <= 8 * 11  # only rows of targets and draws


def test_tree_follows_the_rows_changed_by_each_step():
    head = _head(True)
    opt = OPTIMIZERS.get("lazy_adam")(head.parameters(), lr=0.05)
    head.on_epoch_start(0, torch.Generator())
    g = torch.Generator().manual_seed(4)
    for step in range(3):
        h = torch.randn(8, 6, generator=g)
        y = torch.randint(0, 50, (8,), generator=g)
        opt.zero_grad()
        head.loss(h, y, None, g).backward()
        opt.step()
        head.after_step(step + 1, opt)
    fresh = SAMPLERS.get("rff")(50, D=16)
    fresh.update(F.normalize(head.E.detach(), dim=1), None)
    q = torch.randn(4, 6, generator=g)
    ids = torch.arange(50).expand(4, -1)
    # probabilities, not logs: near-zero (clamped) RFF masses differ by float rounding of the sums
    assert torch.allclose(head.sampler.log_prob(q, ids).exp(), fresh.log_prob(q, ids).exp(), atol=1e-5)


def test_lazy_adam_equals_adam_on_dense_and_touches_only_sparse_rows():
    torch.manual_seed(0)
    W0 = torch.randn(10, 3)
    a, b = W0.clone().requires_grad_(True), W0.clone().requires_grad_(True)
    oa, ob = torch.optim.Adam([a], lr=0.1), OPTIMIZERS.get("lazy_adam")([b], lr=0.1)
    for _ in range(5):
        for p, o in ((a, oa), (b, ob)):
            o.zero_grad()
            (p.square().sum() + p.sum()).backward()
            o.step()
    assert torch.allclose(a, b, atol=1e-6)
    # sparse: rows never in a gradient keep their value; rows in every step follow dense Adam
    E = torch.nn.Parameter(W0.clone())
    opt = OPTIMIZERS.get("lazy_adam")([E], lr=0.1)
    ref = W0[:4].clone().requires_grad_(True)
    ropt = torch.optim.Adam([ref], lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        F.embedding(torch.tensor([0, 1, 2, 3, 1]), E, sparse=True).square().sum().backward()
        opt.step()
        ropt.zero_grad()
        (ref[[0, 1, 2, 3, 1]]).square().sum().backward()
        ropt.step()
    assert torch.equal(E.detach()[4:], W0[4:])
    assert torch.allclose(E.detach()[:4], ref.detach(), atol=1e-6)


def test_clip_grad_norm_counts_sparse_rows_once():
    E = torch.nn.Parameter(torch.zeros(5, 2))
    w = torch.nn.Parameter(torch.zeros(3))
    (F.embedding(torch.tensor([1, 1, 3]), E, sparse=True).sum() * 2 + (w * 3).sum()).backward()
    dense = torch.cat([E.grad.to_dense().flatten(), w.grad])
    norm = clip_grad_norm([E, w], 1.0)
    assert float(norm) == pytest.approx(dense.norm().item(), rel=1e-6)
    after = torch.cat([E.grad.to_dense().flatten(), w.grad])
    assert after.norm().item() == pytest.approx(1.0, rel=1e-4)


def test_clip_grad_norm_equals_the_float64_sum_of_squares_bit_for_bit():
    """The norm is the float64 sum of every gradient's squares, accumulated gradient by gradient (the form the
    kept runs were trained with), to the last bit, and the gradients are scaled by max_norm / norm; a float64
    or non-contiguous gradient is read, never squared in place."""
    g = torch.Generator().manual_seed(3)
    shapes = [(300, 20), (20, 300), (7,), (40, 5)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    params.append(torch.nn.Parameter(torch.zeros(6, 4, dtype=torch.float64)))
    grads = [torch.randn(s, generator=g) for s in shapes] + [torch.randn(6, 4, generator=g, dtype=torch.float64)]
    grads[1] = torch.randn(300, 20, generator=g).T  # a transposed (non-contiguous) gradient
    grads = [gr * torch.exp(4 * torch.randn(gr.shape, generator=g, dtype=gr.dtype)) for gr in grads]  # at this
    # dynamic range another accumulation (torch.linalg.vector_norm, a dot product) misses the last bits
    for p, gr in zip(params, grads):
        p.grad = gr.clone()
    want = torch.sqrt(sum((gr.double().square().sum() for gr in grads), torch.zeros((), dtype=torch.float64)))
    norm = clip_grad_norm(params, 1.0)
    assert norm.item() == want.item()  # exactly
    factor = 1.0 / (want + 1e-6)
    for p, gr in zip(params, grads):
        assert torch.equal(p.grad, gr * factor.to(gr.dtype))


def test_pick_one_positive_draws_only_and_uniformly_among_positives():
    y = torch.tensor([[4, 7, 9], [2, -1, -1], [-1, -1, -1]])
    g = torch.Generator().manual_seed(0)
    counts = {4: 0, 7: 0, 9: 0}
    for _ in range(3000):
        rows, t = pick_one_positive(y, g)
        assert rows.tolist() == [0, 1] and t[1].item() == 2
        counts[t[0].item()] += 1
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts.values())


def test_multilabel_positives_are_masked_as_hits():
    head = _head(False, sampler="uniform")
    head.m = 2000
    y = torch.tensor([[1, 2, 3, 4, 5]] * 2)
    h = torch.randn(2, 6)
    loss = head.loss(h, y, None, torch.Generator().manual_seed(0))
    loss.backward()
    E_grad_rows = set((head.E.grad.abs().sum(1) > 0).nonzero().squeeze(1).tolist())
    assert loss.isfinite()
    # exactly one positive per row receives the target gradient; the other positives are masked negatives
    assert len(E_grad_rows & {1, 2, 3, 4, 5}) <= 2


@pytest.fixture(scope="module")
def tiny_lm(prepared):
    return prepared("synthetic-lm-tiny")


def _lm_model(n, seed=0):
    from xcbench.model import build_model

    return build_model({"encoder": {"name": "lstm_lm", "emb": 8, "hidden": 8, "layers": 2}}, "normalized_softmax",
                       {"tau": 5.0}, n, n, seed)


def test_lm_windows_are_next_token_pairs(tiny_lm):
    processed, entry = tiny_lm
    task = make_test_task("lm", {"bptt": 7}, entry, str(processed), None, torch.device("cpu"), 0)
    tok = task.tokens["train"]
    x, y, idx = next(task.train_batches(4, torch.Generator().manual_seed(0)))
    assert x.shape == (4, 7) and y.shape == (28,)
    for r, w in enumerate(idx.tolist()):
        s = w * 7
        assert torch.equal(x[r], tok[s:s + 7]) and torch.equal(y.view(4, 7)[r], tok[s + 1:s + 8])


def test_lm_evaluation_carries_state_exactly(tiny_lm):
    """Perplexity over streams read bptt tokens at a time equals one pass over each whole stream."""
    processed, entry = tiny_lm
    exp = {"bptt": 5, "eval_tokens": 400, "eval_streams": 4}
    task = make_test_task("lm", exp, entry, str(processed), None, torch.device("cpu"), 0)
    model = _lm_model(task.n_classes).eval()
    got = task.evaluate(model, "val")
    tok = task.tokens["val"]
    L = (len(tok) - 1) // 4
    x, y = tok[:4 * L].view(4, L), tok[1:4 * L + 1].view(4, L)
    with torch.no_grad():
        logp = torch.log_softmax(model.head.scores(model.encode(x)[0]).double(), 1)
    nll = -logp.gather(1, y.reshape(-1, 1)).mean().item()
    assert got["nll"] == pytest.approx(nll, rel=1e-6) and got["ppl"] == pytest.approx(math.exp(nll), rel=1e-6)


def test_lstm_init_is_deterministic_per_seed():
    a, b, c = _lm_model(30, 0), _lm_model(30, 0), _lm_model(30, 1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


@pytest.fixture(scope="module")
def vectors(prepared):
    processed, entry = prepared("synthetic-sphere-tiny")
    return str(processed), entry


def test_kernel_mse_probe(vectors):
    processed, entry = vectors
    probe = make_test_task("kernel_mse", {"tau": 1.0, "pairs": 200}, entry, processed, None, torch.device("cpu"), 0)
    quad = probe.measure({"head": "quadratic_fit"}, 0)
    assert quad["mse"] > 0 and quad["D"] == probe.in_dim ** 2
    rff = [probe.measure({"head": "rff", "params": {"D": D}}, 0)["mse"] for D in (16, 4096)]
    assert rff[1] < rff[0] / 10
    with pytest.raises(KeyError, match="known"):
        probe.measure({"head": "nope"}, 0)


def test_a_measurement_job_logs_what_it_measures_and_the_values(vectors, tmp_path, caplog):
    """A probe has no epochs; its DAG log still says what ran, how long it took and what came out."""
    import logging

    from xcbench.run import make_run
    from xcbench.train import execute

    processed, entry = vectors
    probe = make_test_task("kernel_mse", {"tau": 1.0, "pairs": 50}, entry, processed, None, torch.device("cpu"), 0)
    exp = {"paper": "p", "artifact": "a", "scale": "tiny", "task": {"name": "kernel_mse"},
           "methods": {"q": {"head": "quadratic_fit"}}}
    with caplog.at_level(logging.INFO, logger="xcbench.train"):
        m = execute(make_run(exp, "synthetic-sphere-tiny", "q", 0), probe, tmp_path, torch.device("cpu"))
    lines = [r.getMessage() for r in caplog.records]
    assert any("synthetic-sphere-tiny/q measures kernel_mse" in x for x in lines)
    assert any("synthetic-sphere-tiny/q measured in" in x and f"mse={m['metrics']['mse']:.4g}" in x for x in lines)


def test_quadratic_fit_is_least_squares_optimal():
    from xcbench.tasks.probes import quadratic_fit as _quadratic_fit

    h, c = _unit(300, 4, 6), _unit(300, 4, 7)
    x = (h * c).sum(1)
    fit = _quadratic_fit(h, c, 2.0)
    best = (fit - torch.exp(2.0 * x)).square().mean()
    for da, db in ((0.01, 0), (-0.01, 0), (0, 0.01), (0, -0.01)):
        A = torch.stack([x.square(), torch.ones_like(x)], 1)
        coef = torch.linalg.lstsq(A, torch.exp(2.0 * x).unsqueeze(1)).solution.squeeze(1) + torch.tensor([da, db],
                                                                                                          dtype=x.dtype)
        assert (A @ coef - torch.exp(2.0 * x)).square().mean() >= best


def test_loss_timing_probe_times_and_skips_oversized_trees(vectors):
    processed, entry = vectors
    exp = {"batch": 4, "repeats": 3, "warmup": 1, "max_tree_gib": 1e-6}
    probe = make_test_task("loss_timing", exp, entry, processed, None, torch.device("cpu"), 0)
    spec = {"head": "sampled_softmax", "params": {"sampler": "exact", "m": 5, "normalize": True}}
    r = probe.measure(spec, 0)
    assert r["time_ms"] > 0 and r["n"] == probe.n_classes
    r = probe.measure({"head": "sampled_softmax", "params": {"sampler": "quadratic", "m": 5, "normalize": True}}, 0)
    assert r == {"skipped_tree_gib": pytest.approx(512 * (16 * 16 + 1) * 4 / 2 ** 30)}


def test_gathered_levels_in_chunks_of_queries_give_the_unchunked_draws(monkeypatch):
    """_left_mass gathers a few queries' rows at a time (GATHER_BYTES) when all of them would exceed GATHER_ONCE:
    chunks as small as it allows (two queries), three queries (7 = 3 + 3 + 1: a lone last query, which bmm
    would round apart), and all at once give the same draws and log q bit for bit, so the CPU's chunks keep the
    draws of the runs kept before them."""
    import xcbench.samplers.kernel_tree as kt

    monkeypatch.setattr(kt, "GATHER_ONCE", {"cpu": 0})
    n, d = 300, 5
    E, h = _unit(n, d, 4).float(), _unit(7, d, 5).float()
    out = []
    for chunk in (1, 3 * 50 * 32 * 4, 1 << 40):  # bytes: one query, three, every query in one chunk
        monkeypatch.setattr(kt, "GATHER_BYTES", chunk)
        s = SAMPLERS.get("rff")(n, dense_nodes=1, D=16)
        s.update(E, None)
        out.append(s.sample(h, 50, torch.Generator().manual_seed(0)))
    for ids, lq in out[1:]:
        assert torch.equal(ids, out[0][0]) and torch.equal(lq, out[0][1])


@pytest.mark.parametrize("name", ["quadratic", "rff"])
def test_tree_descent_draws_the_numbers_of_one_draw_per_level(name):
    """The descent draws every level's uniforms at once (one copy to a GPU, not one per level); on a CPU
    generator these are the numbers a draw per level gives, so runs made before keep their draws: a descent
    that draws per level, written out here, picks the same classes with the same log q."""
    n, d, m = 300, 5, 50
    s = SAMPLERS.get(name)(n, **({"D": 32} if name == "rff" else {}))
    s.update(_unit(n, d, 4).float(), None)
    h = _unit(7, d, 5).float()
    ids, lq = s.sample(h, m, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    ph, parent = s._start(h, m)
    node, ref_lq = torch.zeros(7, m, dtype=torch.long), torch.zeros(7, m, dtype=ph.dtype)
    for lvl in range(s.depth):
        lp_l, lp_r, m_l, m_r = s._branch(ph, node, lvl, parent)
        right = torch.rand(node.shape, generator=g).log() >= lp_l
        ref_lq += torch.where(right, lp_r, lp_l)
        parent, node = torch.where(right, m_r, m_l), 2 * node + right.long()
    assert torch.equal(ids, node) and torch.equal(lq, ref_lq.float())
    assert len(set(ids.flatten().tolist())) > 20  # the draws spread over the classes: a real descent
