"""Dynamic class selection (Zhang et al. 2018): selectors, the selective softmax, NCE, HSM, HF-A's
schedule and the CP_K / NCG_K probes, each against an exact reference."""

import math

import pytest
import torch
import torch.nn.functional as F

from xcbench import metrics as M
from xcbench.heads.hsm import HierarchicalSoftmax, balanced_paths
from xcbench.heads.nce import NCE
from xcbench.heads.selective_softmax import SelectiveSoftmax
from xcbench.registry import SELECTORS
from xcbench.selectors import forest as fo
from xcbench.selectors import rerank as rr
from xcbench.selectors.adaptive import AdaptiveHashingForest, smallest_k_reaching


def clustered(C=600, d=16, k=30, noise=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    cent = torch.randn(k, d, generator=g)
    return cent[torch.randint(k, (C,), generator=g)] + noise * torch.randn(C, d, generator=g), g


@pytest.mark.parametrize("name", SELECTORS.names())
def test_every_selector_keeps_labels_and_returns_sorted_unique_ids(name):
    _selector_available(name)
    W, g = clustered()
    sel = SELECTORS.get(name)(len(W))
    sel.bind(W)
    sel.update(W, torch.Generator().manual_seed(1))
    h, y = torch.randn(8, W.shape[1], generator=g), torch.randint(len(W), (8,), generator=g)
    S = sel.select(h, y, 40, torch.Generator().manual_seed(2))
    assert torch.isin(y, S).all() and torch.equal(S, torch.unique(S)) and S.min() >= 0 and S.max() < len(W)


# What each registered selector must reach on a planted problem whose answer is known: classes in
# well-separated clusters, queries on cluster centres, so the exact top-q of W h is the query's
# cluster. Each entry judges the share of that exact answer in the batch's active set, given
# the active-set budget k and C; a new selector fails `test_every_selector_against_the_planted_answer` until it has one.
REFERENCES = {  # name: (constructor params for this problem, judge of the share)
    "optimal": ({}, lambda ov, k, C: ov == 1.0),                 # it is the definition
    "random": ({}, lambda ov, k, C: abs(ov - k / C) < 0.1),      # a uniform draw of k classes holds k / C of any set
    "hf": ({}, lambda ov, k, C: ov >= 0.8),
    "hf_a": ({}, lambda ov, k, C: ov >= 0.8),
    "kmeans": ({"clusters": 60}, lambda ov, k, C: ov >= 0.8),    # one k-means cluster per planted one
    "pca_hash": ({}, lambda ov, k, C: ov >= 0.5),
    "faiss_ivf": ({"nprobe": 4}, lambda ov, k, C: ov >= 0.8),     # an ANN of the response, like optimal
    "annoy": ({"trees": 10}, lambda ov, k, C: ov >= 0.8),         # an ANN of the cosine, like hf
}


def _selector_available(name):
    req = getattr(SELECTORS.get(name), "requires", None)
    if req:
        pytest.importorskip(req, reason=f"selector {name} needs the optional {req}")


@pytest.mark.parametrize("metric", ["angular", "dot"])
def test_annoy_searched_exhaustively_is_exact(metric):
    """With search_k at least the forest's nodes, Annoy visits every leaf: each example's q classes are
    the exact top-q by cosine (angular) or by the response w . h (dot); the default search finds fewer."""
    pytest.importorskip("annoy", reason="selector annoy needs the optional annoy")
    W, g = clustered(C=500, d=12, noise=0.5)
    W = W * (0.5 + torch.rand(len(W), 1, generator=g))                                  # norms differ: the two orders differ
    h, y = torch.randn(9, 12, generator=g), torch.zeros(9, dtype=torch.long)
    q = 7
    score = F.normalize(W, dim=1) @ h.T if metric == "angular" else W @ h.T              # (C, B)
    want = score.topk(q, dim=0).indices.T                                                 # (B, q)
    sel = SELECTORS.get("annoy")(len(W), trees=4, metric=metric, search_k=10 ** 6)
    sel.update(W, torch.Generator().manual_seed(0))
    got = sel.candidates(h, y, q, None)
    assert all(set(a.tolist()) == set(b.tolist()) for a, b in zip(got, want))
    assert (F.normalize(W, dim=1) @ h.T).topk(q, dim=0).indices.T.tolist() != (W @ h.T).topk(q, dim=0).indices.T.tolist()
    again = SELECTORS.get("annoy")(len(W), trees=4, metric=metric, search_k=10)
    again.update(W, torch.Generator().manual_seed(0))
    twice = SELECTORS.get("annoy")(len(W), trees=4, metric=metric, search_k=10)
    twice.update(W, torch.Generator().manual_seed(0))
    assert torch.equal(again.candidates(h, y, q, None), twice.candidates(h, y, q, None))   # same seed, same trees


@pytest.mark.parametrize("name", SELECTORS.names())
def test_every_selector_against_the_planted_answer(name):
    """60 tight clusters of exactly q = 20 classes on well-separated directions; 16 queries on cluster
    centres with labels in their cluster: the exact top-q of W h is the query's cluster, and the batch's
    active set (budget q per query) is judged by how much of the union of those answers it holds."""
    assert name in REFERENCES, f"add the selector {name!r} to REFERENCES with what it must reach on the planted problem"
    _selector_available(name)
    n_clusters, q, d, B = 60, 20, 16, 16
    C = n_clusters * q
    g = torch.Generator().manual_seed(0)
    cent = F.normalize(torch.randn(n_clusters, d, generator=g), dim=1) * 4
    lab = torch.arange(C) // q
    W = cent[lab] + 0.05 * torch.randn(C, d, generator=g)                                   # (C, d)
    c = torch.randperm(n_clusters, generator=g)[:B]                                         # the queries' clusters
    h = cent[c] + 0.01 * torch.randn(B, d, generator=g)                                     # (B, d)
    y = c * q + torch.randint(q, (B,), generator=g)                                         # a label in each cluster
    want = torch.unique(torch.topk(h @ W.T, q, dim=1).indices)
    assert torch.equal(want, torch.unique(torch.cat([torch.arange(i * q, (i + 1) * q) for i in c.tolist()])))
    params, judge = REFERENCES[name]
    sel = SELECTORS.get(name)(C, **params)
    sel.bind(W)
    sel.update(W, torch.Generator().manual_seed(1))
    S = sel.select(h, y, q * B, torch.Generator().manual_seed(2))
    assert torch.isin(y, S).all(), f"{name} dropped a label"
    ov = torch.isin(want, S).float().mean().item()
    assert judge(ov, q * B, C), f"{name}: the active set holds {ov:.3f} of the exact answer ({len(S)} classes)"


def test_optimal_is_torch_topk():
    W, g = clustered()
    sel = SELECTORS.get("optimal")(len(W))
    sel.bind(W)
    h = torch.randn(5, W.shape[1], generator=g)
    assert torch.equal(sel.candidates(h, None, 7, g), torch.topk(h @ W.T, 7, dim=1).indices)


def test_random_fills_exactly_k_distinct_classes():
    sel = SELECTORS.get("random")(100)
    y = torch.tensor([3, 3, 7, 50])
    S = sel.select(torch.zeros(4, 2), y, 20, torch.Generator().manual_seed(0))
    assert len(S) == 20 and torch.isin(torch.tensor([3, 7, 50]), S).all()


def test_pca_and_kmeans_select_the_labels_group():
    W, g = clustered()
    y = torch.tensor([0, 5])
    for name in ("pca_hash", "kmeans"):
        sel = SELECTORS.get(name)(len(W))
        sel.update(W, torch.Generator().manual_seed(0))
        got = torch.sort(sel.candidates(None, y, 1, g)).values
        want = torch.nonzero(torch.isin(sel.keys, sel.keys[y])).squeeze(1)
        assert torch.equal(got, want)
    pca = SELECTORS.get("pca_hash")(len(W), bits=3)
    pca.update(W, torch.Generator().manual_seed(0))
    P = torch.linalg.eigh(((W - W.mean(0)).T @ (W - W.mean(0))).double())[1][:, -3:]
    bits = ((W - W.mean(0)).double() @ P > 0).long()
    assert torch.equal(pca.keys, (bits * torch.tensor([1, 2, 4])).sum(1))


def test_every_tree_partitions_the_classes_into_leaves_of_at_most_B():
    W, _ = clustered(C=500)
    f = fo.Forest(F.normalize(W, dim=1), trees=6, leaf=8, gen=torch.Generator().manual_seed(0))
    for tree in f.leaves():
        ids = torch.cat(tree)
        assert torch.equal(torch.sort(ids).values, torch.arange(len(W)))   # each class in exactly one leaf
        assert max(len(leaf) for leaf in tree) <= 8


def test_duplicate_rows_still_give_a_partition():
    U = F.normalize(torch.ones(40, 4), dim=1)
    f = fo.Forest(U, trees=2, leaf=4, gen=torch.Generator().manual_seed(0))
    for tree in f.leaves():
        assert torch.equal(torch.sort(torch.cat(tree)).values, torch.arange(40)) and max(map(len, tree)) <= 4


def test_gram_product_and_gather_builds_give_the_same_trees(monkeypatch):
    W, _ = clustered(C=300)
    U = F.normalize(W, dim=1)
    a = fo.Forest(U, 3, 8, torch.Generator().manual_seed(5))                      # Gram matrix
    monkeypatch.setattr(fo, "GRAM_MAX", 0)
    monkeypatch.setattr(fo, "GEMM_BLOCK", 5)                                       # several blocks per level
    b = fo.Forest(U, 3, 8, torch.Generator().manual_seed(5))                      # products, then gathers
    monkeypatch.setattr(fo, "GEMM_PER_TREE", 0)
    c = fo.Forest(U, 3, 8, torch.Generator().manual_seed(5))                      # gathers only
    for f in (b, c):
        assert torch.equal(a.order, f.order) and torch.equal(a.size, f.size)


def test_descent_stops_at_the_deepest_node_with_at_least_Q_classes():
    W, g = clustered(C=400)
    f = fo.Forest(F.normalize(W, dim=1), 3, 4, torch.Generator().manual_seed(0))
    x = F.normalize(torch.randn(6, W.shape[1], generator=g), dim=1)
    node = f.descend(x, 10)[0]
    for b in range(6):
        for l in range(3):
            v = int(node[b, l])
            assert int(f.size[v]) >= 10
            if f.left[v] >= 0:  # the child on x's side holds fewer than Q
                side = float(x[b] @ f.normal[v]) >= float(f.thr[v])
                child = int(f.left[v] if side else f.right[v])
                assert int(f.size[child]) < 10


def test_many_trees_recover_the_optimal_set_on_clustered_data():
    W, g = clustered(C=2000, d=16, k=40, noise=0.3)
    U = F.normalize(W, dim=1)
    x = F.normalize(W[:64] + 0.2 * torch.randn(64, 16, generator=g), dim=1)
    top = torch.topk(x @ U.T, 10, dim=1).indices
    overlap = {}
    for L in (1, 50):
        q, c = fo.Forest(U, L, 16, torch.Generator().manual_seed(0)).query(x, 10)
        sel = torch.zeros(64, len(W), dtype=torch.bool)
        sel[q, c] = True
        overlap[L] = sel.gather(1, top).float().mean().item()
    assert overlap[50] >= 0.95 and overlap[50] > overlap[1]


def test_indexed_selector_resumes_with_the_same_structure():
    W, g = clustered()
    a = SELECTORS.get("hf")(len(W), trees=3, leaf=8)
    a.update(W, torch.Generator().manual_seed(3))
    b = SELECTORS.get("hf")(len(W), trees=3, leaf=8)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.forest.order, b.forest.order) and torch.equal(a.forest.normal, b.forest.normal)


def test_selective_softmax_over_all_classes_equals_full_softmax_loss_and_gradient():
    C, d = 30, 6
    head = SelectiveSoftmax(d, C, torch.Generator().manual_seed(0), selector="random", M=C)
    g = torch.Generator().manual_seed(1)
    h = torch.randn(5, d, generator=g, requires_grad=True)
    y = torch.randint(C, (5,), generator=g)
    loss = head.loss(h, y, None, torch.Generator().manual_seed(2))
    gW, gh = torch.autograd.grad(loss, [head.W, h])
    W = head.W.detach().clone().requires_grad_(True)
    h2 = h.detach().clone().requires_grad_(True)
    ref = F.cross_entropy(h2 @ W.T, y)
    rW, rh = torch.autograd.grad(ref, [W, h2])
    assert torch.allclose(loss, ref, atol=1e-6)
    assert torch.allclose(gW.to_dense(), rW, atol=1e-6) and torch.allclose(gh, rh, atol=1e-6)


def test_selective_softmax_restricts_to_the_active_set():
    C, d = 50, 4
    head = SelectiveSoftmax(d, C, torch.Generator().manual_seed(0), selector="random", M=10)
    h, y = torch.randn(3, d), torch.tensor([1, 2, 3])
    S = head.active_set(h, y, torch.Generator().manual_seed(4))
    loss = head.loss(h, y, None, torch.Generator().manual_seed(4))
    assert len(S) == 10
    assert torch.allclose(loss, F.cross_entropy(h @ head.W[S].T, torch.searchsorted(S, y)))


def test_cap_keeps_the_labels_and_samples_by_renormalised_probability():
    C, d = 40, 3
    head = SelectiveSoftmax(d, C, torch.Generator().manual_seed(0), selector="optimal", M=4)
    with torch.no_grad():
        head.W.zero_()
        head.W[10, 0] = 8.0          # class 10 holds almost all the mass on S for h = e_0
    h, y = torch.tensor([[1.0, 0, 0], [1.0, 0, 0]]), torch.tensor([0, 1])
    S = torch.tensor([0, 1, 5, 10, 20, 30])
    counts = torch.zeros(C)
    for s in range(200):
        out = head.cap(h, y, S, 3, torch.Generator().manual_seed(s))
        assert len(out) == 3 and torch.isin(y, out).all() and torch.isin(out, S).all()
        counts[out] += 1
    assert counts[10] > 190


def brute_force_nce(head, h, y, n, q: list[float]) -> float:
    """The batch mean of -log sigma(s_y - log(k q_y)) - sum_j log(1 - sigma(s_nj - log(k q_nj))), one class at a time."""
    k, total = len(n), 0.0
    for i in range(len(y)):
        s = lambda c: (h[i] @ head.W[c] + head.b[c, 0]).item()  # noqa: E731
        total += -math.log(1 / (1 + math.exp(-(s(y[i]) - math.log(k * q[y[i]])))))
        total += sum(-math.log(1 - 1 / (1 + math.exp(-(s(c) - math.log(k * q[c]))))) for c in n.tolist())
    return total / len(y)


def test_nce_loss_is_the_brute_force_logistic_loss():
    C, d, k = 12, 4, 5
    head = NCE(d, C, torch.Generator().manual_seed(0), k=k)
    with torch.no_grad():
        head.b.normal_(generator=torch.Generator().manual_seed(9))
    h, y = torch.randn(3, d), torch.tensor([2, 7, 11])
    loss = head.loss(h, y, None, torch.Generator().manual_seed(1))
    n = torch.multinomial(head.log_q.exp(), k, replacement=True, generator=torch.Generator().manual_seed(1))
    assert abs(loss.item() - brute_force_nce(head, h, y, n, [1.0 / C] * C)) < 1e-5


def test_nce_with_unigram_noise_draws_and_corrects_by_each_class_own_q():
    C, d, k = 6, 3, 4
    counts = torch.tensor([50, 20, 10, 5, 0, 15])
    head = NCE(d, C, torch.Generator().manual_seed(0), k=k, noise="unigram")
    head.setup({"label_counts": counts})
    q = (counts + 1.0) / (counts + 1.0).sum()                                  # add-one: a class never seen can be drawn
    assert torch.allclose(head.log_q.exp(), q.float())
    with torch.no_grad():
        head.b.normal_(generator=torch.Generator().manual_seed(9))
    h, y = torch.randn(2, d), torch.tensor([0, 4])
    loss = head.loss(h, y, None, torch.Generator().manual_seed(1))
    n = torch.multinomial(q.float(), k, replacement=True, generator=torch.Generator().manual_seed(1))
    assert abs(loss.item() - brute_force_nce(head, h, y, n, q.tolist())) < 1e-5


@pytest.mark.parametrize("noise", ["uniform", "unigram"])
def test_nce_bias_starts_at_the_noise_log_probabilities_only_when_asked(noise):
    C, d, counts = 5, 3, torch.tensor([40, 9, 0, 3, 7])
    start = {}
    for init in ("zero", "log_noise"):
        head = NCE(d, C, torch.Generator().manual_seed(0), noise=noise, bias_init=init)
        head.setup({"label_counts": counts})
        start[init] = head.b[:, 0].detach()
    q = (counts + 1.0) / (counts + 1.0).sum() if noise == "unigram" else torch.full((C,), 1.0 / C)
    assert torch.equal(start["zero"], torch.zeros(C))
    assert torch.allclose(start["log_noise"], q.log().float())
    with pytest.raises(ValueError, match="bias_init"):
        NCE(d, C, torch.Generator().manual_seed(0), bias_init="unigram")


def tiny_faces_run(prepared, method: dict, lr: float):
    """go(out, **FitOptions): one run of `method` (a head spec) on synthetic-faces-tiny, 3 epochs of lazy Adam at `lr`,
    as `xcbench train` does it (for the resume tests)."""
    from conftest import train_run

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    processed, entry = prepared("synthetic-faces-tiny")
    exp = {"paper": "test", "artifact": "unit", "title": "t", "scale": "tiny",
           "task": {"name": "faces", "params": {"eval_train_size": 100}},
           "render": {"kind": "table", "renderer": "metric_table"}, "datasets": ["synthetic-faces-tiny"], "seeds": [0],
           "methods": normalise_methods({"m": method}), "model": {"encoder": {"name": "mlp", "hidden": 8}},
           "train": {"epochs": 3, "batch_size": 32, "lr": lr, "optimizer": "lazy_adam"}}
    dev = torch.device("cpu")
    return lambda out, **kw: train_run(exp, make_task(exp, entry, processed, None, dev, 0), "synthetic-faces-tiny", "m",
                                       0, out, dev, **kw)


@pytest.mark.parametrize("method", [{"head": "nce", "params": {"k": 5, "noise": "unigram", "bias_init": "log_noise"}},
                                    {"head": "full_softmax", "params": {"bias_init": "log_prior"}}])
def test_run_with_its_bias_started_at_a_prior_resumes_to_identical_metrics(prepared, tmp_path, method):
    """The bias start (NCE's log q, the full softmax's log prior) is written in `setup`, before a checkpoint's weights
    are loaded over it: a resumed run keeps the trained bias (one started again changes every later epoch)."""
    go = tiny_faces_run(prepared, method, lr=0.05)
    full = go(tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        go(tmp_path / "cut", interrupt_after=1)
    resumed = go(tmp_path / "cut")
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]


def test_hsm_is_a_distribution_and_its_loss_is_minus_log_path_probability():
    C, d = 11, 3
    head = HierarchicalSoftmax(d, C, torch.Generator().manual_seed(0))
    with torch.no_grad():
        head.a.normal_(generator=torch.Generator().manual_seed(1))
    h, y = torch.randn(4, d), torch.tensor([0, 5, 10, 3])
    logp = head.scores(h)
    assert torch.allclose(logp.exp().sum(1), torch.ones(4), atol=1e-5)
    # brute force: walk the range-halving tree explicitly
    def path_prob(hv, c):
        lo, hi, p = 0, C, 1.0
        ids = {}
        queue = [(0, C)]
        while queue:  # number the internal nodes breadth-first, as balanced_paths does
            nxt = []
            for a, b in queue:
                if b - a > 1:
                    ids[(a, b)] = len(ids)
                    nxt += [(a, (a + b) // 2), ((a + b) // 2, b)]
            queue = nxt
        while hi - lo > 1:
            mid, v = (lo + hi) // 2, ids[(lo, hi)]
            z = (hv @ head.U[v] + head.a[v, 0]).item()
            if c < mid:
                p, hi = p / (1 + math.exp(-z)), mid
            else:
                p, lo = p / (1 + math.exp(z)), mid
        return p
    for i in range(4):
        assert abs(logp[i, y[i]].item() - math.log(path_prob(h[i], int(y[i])))) < 1e-5
    assert abs(head.loss(h, y, None, None).item() + logp[torch.arange(4), y].mean().item()) < 1e-5
    nodes, signs = balanced_paths(C)
    assert nodes.max() == C - 2 and (signs != 0).sum(1).min() == math.floor(math.log2(C))


def test_cp_and_ncg_equal_equations_3_and_5():
    g = torch.Generator().manual_seed(0)
    o, y = 3 * torch.randn(6, 20, generator=g), torch.randint(20, (6,), generator=g)
    h = torch.randn(6, 4, generator=g)
    ks = [1, 3, 10]
    cp, ncg = M.cp_at_k(o, ks), M.ncg_at_k(o, y, ks)
    for j, K in enumerate(ks):
        p = torch.softmax(o.double(), 1)
        cps, ncgs = [], []
        for i in range(6):
            T = torch.topk(o[i], K).indices
            cps.append(p[i, T].sum().item())
            G = torch.outer(p[i] - F.one_hot(y[i], 20).double(), h[i].double())     # eq. 4: (C, D)
            Gk = torch.zeros_like(G)
            Gk[T] = G[T]
            ncgs.append(((G * Gk).sum() / (G.norm() * Gk.norm())).square().item())  # eq. 5
        assert abs(cp[j] - sum(cps) / 6) < 1e-9 and abs(ncg[j] - sum(ncgs) / 6) < 1e-9


def test_adaptive_schedule_follows_its_rule():
    sel = AdaptiveHashingForest(1000, tau_start=0.5, tau_end=0.9, trees_start=4, trees_end=20, T_start=100,
                                T_end=900, M_min=1, M_max=0.5)
    assert sel.budget(10) == 10                              # before any measurement: the configured M
    p = torch.tensor([0.4, 0.2, 0.2, 0.08, 0.07, 0.05])       # mean CP_K = 0.4, 0.6, 0.8, 0.88, 0.95, 1.0
    sel.observe(p.log().expand(3, 6)[:, torch.randperm(6, generator=torch.Generator().manual_seed(0))])
    assert torch.allclose(sel.cp, p.cumsum(0))
    out = sel.adapt(0.0, batch_size=8)                       # tau 0.5 -> K* = 2
    assert out == {"M": 16, "L": 4, "T": 100, "tau_cp": 0.5} and sel.trees == 4 and sel.rebuild_every == 100
    out = sel.adapt(0.5, batch_size=8)                       # tau 0.7 -> K* = 3
    assert (out["M"], out["L"], out["T"]) == (24, 12, 500) and sel.budget(10) == 24
    out = sel.adapt(1.0, batch_size=8)                       # tau 0.9 -> K* = 5
    assert (out["M"], out["L"], out["T"]) == (40, 20, 900)
    assert smallest_k_reaching(torch.tensor([0.1, 0.2]), 0.5) == 2


def test_adaptive_phase_start_logs_its_settings(caplog):
    """A run's log says what each HF-A phase set (its M, trees and T), at the phase's first epoch and only there."""
    import logging

    caplog.set_level(logging.INFO, logger="xcbench")
    sel = AdaptiveHashingForest(1000, trees_start=4, trees_end=20, T_start=100, T_end=900, phase_epochs=2, M_max=0.5)
    sel.observe(torch.tensor([0.4, 0.2, 0.2, 0.08, 0.07, 0.05]).log().expand(3, 6))   # mean CP_K 0.4, 0.6, 0.8, ...
    assert [sel.start_epoch(e, e / 4, batch_size=8) for e in range(4)] == [True, False, True, False]
    assert [r.getMessage() for r in caplog.records] == [
        "HF-A phase from epoch 1: M = 24 active classes (tau_cp 0.700), 4 trees rebuilt every 100 steps",
        "HF-A phase from epoch 3: M = 24 active classes (tau_cp 0.800), 12 trees rebuilt every 500 steps"]


def test_open_set_split_has_one_gallery_sample_per_probe_identity():
    from xcbench.tasks.faces import open_set_split

    y = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    s = open_set_split(y, 0.5)
    assert s["gallery"].tolist() == [0, 3, 6, 7, 8, 9, 10, 11]
    assert s["queries"].tolist() == [1, 2, 4, 5] and s["pairs"].tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("selector,sp", [("hf", {"trees": 3, "leaf": 4, "rebuild_every": 7}),
                                         ("hf_a", {"trees_start": 2, "trees_end": 4, "T_start": 5, "T_end": 9,
                                                   "phase_epochs": 1, "leaf": 4})])
def test_selective_run_resumes_to_identical_metrics(prepared, tmp_path, selector, sp):
    # M = 30 of 50 classes against about 24 distinct labels in a batch of 32: the trees choose the rest, so a resume
    # that rebuilt other trees changes the run (with M below the batch's labels the trees chose nothing and it passed)
    go = tiny_faces_run(prepared, {"head": "selective_softmax",
                                   "params": {"selector": selector, "selector_params": sp, "M_frac": 0.6}}, lr=0.01)
    full = go(tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        go(tmp_path / "cut", interrupt_after=1)
    resumed = go(tmp_path / "cut")
    assert resumed["metrics"] == full["metrics"]
    assert resumed["curves"] == full["curves"] and resumed["head"] == full["head"]
    assert {"verif_tpr", "ident_top1"} <= set(full["metrics"])
    # inside an epoch (a checkpoint after every batch): in the first epoch, and in the second, a phase start of HF-A
    # (its adapted M, L, T and the rebuilt forest come from the checkpoint, not from a second epoch start)
    for at in (0.5, 1.4):
        with pytest.raises(KeyboardInterrupt, match="in epoch"):
            go(tmp_path / f"mid{at}", interrupt_after=at, checkpoint_minutes=1e-9)
        resumed = go(tmp_path / f"mid{at}", checkpoint_minutes=1e-9)
        assert resumed["metrics"] == full["metrics"], at
        assert resumed["curves"] == full["curves"] and resumed["head"] == full["head"], at


@pytest.mark.parametrize("pool", [1, 4])
@pytest.mark.parametrize("Q", [1, 6])
def test_pool_reranks_the_cells_reached_at_pool_times_Q_classes(pool, Q):
    """Brute force: per example, the top-Q by cosine of the union of the L cells on its walks
    stopped at the deepest node with >= pool x Q classes."""
    W, g = clustered(C=800)
    sel = SELECTORS.get("hf")(len(W), trees=4, leaf=4, pool=pool)
    sel.update(W, torch.Generator().manual_seed(0))
    h = torch.randn(7, W.shape[1], generator=g)
    f, x = sel.forest, F.normalize(h, dim=1)
    rows, cls = sel.per_example(h, Q)
    for b in range(len(h)):
        walk = torch.zeros(len(W), dtype=torch.bool)
        for l in range(4):
            v = int(f.roots[l])
            while f.left[v] >= 0:
                child = int(f.left[v] if float(x[b] @ f.normal[v]) >= float(f.thr[v]) else f.right[v])
                if int(f.size[child]) < pool * Q:
                    break
                v = child
            walk[f.order[int(f.start[v]):int(f.start[v]) + int(f.size[v])]] = True
        cand = torch.nonzero(walk).squeeze(1)
        want = cand[torch.topk(F.normalize(W[cand], dim=1) @ x[b], Q).indices]
        assert sorted(cls[rows == b].tolist()) == sorted(want.tolist())


def _walk(f, x, v, Q):
    """Brute-force walk from node v: [(distance to the boundary, untaken sibling) per step], end node."""
    steps = []
    while f.left[v] >= 0:
        proj = float(x @ f.normal[v]) - float(f.thr[v])
        child, sib = (int(f.left[v]), int(f.right[v])) if proj >= 0 else (int(f.right[v]), int(f.left[v]))
        if int(f.size[child]) < Q:
            break
        steps.append((abs(proj) / float(f.normal[v].norm()), sib))
        v = child
    return steps, v


@pytest.mark.parametrize("probe, width", [(1, 1), (3, 1), (8, 1), (8, 3), (3, 5)])
@pytest.mark.parametrize("Q", [1, 6])
@pytest.mark.parametrize("dense", [32, 0])
def test_probe_reranks_the_cells_of_best_first_walks(probe, width, Q, dense, monkeypatch):
    """Brute force: per example, the paper's walk in each of the L trees, then rounds until probe x L
    walks are made; each pops the width x L (the last round: what is left) untaken sides of lowest
    priority (the largest boundary distance on the way there) and walks from each; the top-Q by cosine
    of the union of every walk's cell (scored by one product, or by gathered rows: DENSE_RATIO 0)."""
    monkeypatch.setattr(rr, "DENSE_RATIO", dense)
    W, g = clustered(C=800)
    sel = SELECTORS.get("hf")(len(W), trees=4, leaf=4, probe=probe, probe_width=width)
    sel.update(W, torch.Generator().manual_seed(0))
    h = torch.randn(7, W.shape[1], generator=g)
    f, x = sel.forest, F.normalize(h, dim=1)
    rows, cls = sel.per_example(h, Q)
    nodes = f.probes(x, Q, probe, width)                                           # (B, <= L (1 + probe))
    for b in range(len(h)):
        ends, heap = [], []
        for l in range(4):
            s, v = _walk(f, x[b], int(f.roots[l]), Q)
            ends.append(v)
            heap += s
        for done in range(0, probe, width):
            heap.sort(key=lambda e: e[0])                                          # stable: ties keep their order
            k = 4 * min(width, probe - done)
            popped, heap = heap[:k], heap[k:]
            for gap, side in popped:
                s, v = _walk(f, x[b], side, Q)
                ends.append(v)
                heap += [(max(gap, g2), s2) for g2, s2 in s]
        assert sorted(ends) == sorted(v for v in nodes[b].tolist() if v >= 0)
        walk = torch.zeros(len(W), dtype=torch.bool)
        for v in ends:
            walk[f.order[int(f.start[v]):int(f.start[v]) + int(f.size[v])]] = True
        cand = torch.nonzero(walk).squeeze(1)
        want = cand[torch.topk(F.normalize(W[cand], dim=1) @ x[b], Q).indices]
        assert sorted(cls[rows == b].tolist()) == sorted(want.tolist())


@pytest.mark.parametrize("rerank", ["cosine", "inner"])
def test_prefilter_rescores_the_best_of_a_bfloat16_pass(rerank, monkeypatch):
    """Brute force, robust to ties: per query, the exactly scored short list holds k Q of the pooled
    classes (those of the probed walks) and none outside it ranks above it by the bfloat16 rows (times
    the row norms for `inner`); the Q kept rank first in it by the float32 rows (the first pass: bfloat16 rows times
    the bfloat16 query). Rows are clusters of
    near-copies that bfloat16 cannot tell apart (spread 1e-3), so keeping the first pass's order fails.
    With k Q at least the pool: the exact re-rank's selection."""
    monkeypatch.setattr(rr, "DENSE_RATIO", 0)
    W, g = clustered(C=1200, d=24, k=20, noise=1e-3)
    h = W[:7] + 0.3 * torch.randn(7, W.shape[1], generator=g)
    Q, k = 3, 2
    make = lambda pf: SELECTORS.get("hf")(len(W), trees=4, leaf=8, probe=4, rerank=rerank, prefilter=pf)  # noqa: E731
    sel, exact, wide = make(k), make(0), make(10 ** 6)
    for s in (sel, exact, wide):
        s.update(W, torch.Generator().manual_seed(0))
    f, x = sel.forest, F.normalize(h, dim=1)
    rows, cls = sel.per_example(h, Q)
    weight = W.norm(dim=1) if rerank == "inner" else torch.ones(len(W))
    nodes, flips = f.probes(x, Q, 4), 0
    for b in range(len(h)):
        pool = torch.cat([f.order[int(f.start[v]):int(f.start[v]) + int(f.size[v])] for v in nodes[b].tolist() if v >= 0]).unique()
        short = f.short[b][f.short[b] < len(W)]
        assert len(pool) > k * Q and len(short) == k * Q and bool(torch.isin(short, pool).all())
        rough = lambda c: (f.U[c].bfloat16() @ x[b].bfloat16()).float() * weight[c]  # noqa: E731
        fine = lambda c: (f.U[c] @ x[b]) * weight[c]  # noqa: E731
        assert rough(short).min() >= rough(pool[~torch.isin(pool, short)]).max()
        got = cls[rows == b]
        assert len(got) == Q and fine(got).min() >= fine(short[~torch.isin(short, got)]).max()
        flips += int(set(short[rough(short).topk(Q).indices].tolist()) != set(got.tolist()))
    assert flips >= 2  # the second pass decides for some queries (else this test could not tell it from the first)
    assert all(torch.equal(a, b) for a, b in zip(wide.per_example(h, Q), exact.per_example(h, Q)))


def test_probes_raise_precision_on_clustered_data():
    W, g = clustered(C=4000, d=32, k=40, noise=0.3)
    x = F.normalize(W[:64] + 0.2 * torch.randn(64, 32, generator=g), dim=1)
    top = torch.topk(x @ F.normalize(W, dim=1).T, 10, dim=1).indices
    overlap = {}
    for probe in (0, 4):
        sel = SELECTORS.get("hf")(len(W), trees=3, leaf=16, probe=probe)
        sel.update(W, torch.Generator().manual_seed(0))
        q, c = sel.per_example(x, 10)
        got = torch.zeros(64, len(W), dtype=torch.bool)
        got[q, c] = True
        overlap[probe] = got.gather(1, top).float().mean().item()
    assert overlap[4] >= overlap[0] + 0.1, overlap


def test_pool_and_probe_must_be_integers_in_range():
    with pytest.raises(ValueError, match="probe"):
        SELECTORS.get("hf")(10, probe=-1)


def test_pool_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="pool"):
        SELECTORS.get("hf")(10, pool=0)


def test_inner_rerank_ranks_the_pool_by_response():
    W, g = clustered(C=300)
    W = W * (1 + torch.rand(len(W), 1, generator=g))             # rows of different norms
    sel = SELECTORS.get("hf")(len(W), trees=40, leaf=8, rerank="inner")
    sel.update(W, torch.Generator().manual_seed(0))
    h = torch.randn(6, W.shape[1], generator=g)
    rows, cls = sel.per_example(h, 5)
    want = torch.topk(h @ W.T, 5, dim=1).indices                 # 40 trees pool nearly everything near h
    got = torch.zeros(6, len(W), dtype=torch.bool)
    got[rows, cls] = True
    assert got.gather(1, want).float().mean() >= 0.9


@pytest.mark.parametrize("chunk", [1 << 26, 3 * 5 * 8, 1])
def test_batched_pool_scores_equal_the_per_query_ones(chunk, monkeypatch):
    """The GPU's gathered-pool scoring (rerank.batched: chunks of queries' padded rows, one batched
    product) gives the CPU loop's scores, 0 at the padding, in one chunk, several, or one query each."""
    monkeypatch.setattr(rr, "GATHER_CHUNK", chunk)
    g = torch.Generator().manual_seed(3)
    U = F.normalize(torch.randn(50, 8, generator=g), dim=1)
    x = F.normalize(torch.randn(7, 8, generator=g), dim=1)
    cnt = torch.tensor([5, 0, 3, 5, 1, 4, 2])
    cand = torch.full((7, 5), 50)
    for b, k in enumerate(cnt.tolist()):
        cand[b, :k] = torch.randperm(50, generator=g)[:k].sort().values
    monkeypatch.setattr(rr, "DENSE_RATIO", 0)
    loop = rr.score(U, x, cand, cnt)                                               # the CPU's per-query path
    got = rr.batched(U, x, cand)
    assert torch.allclose(got, loop, atol=1e-6) and (got[cand == 50] == 0).all()
    assert torch.allclose(got, (x @ U.T).gather(1, cand.clamp(max=49)).masked_fill(cand == 50, 0), atol=1e-6)
    low = U.to(torch.bfloat16)
    assert torch.allclose(rr.batched(low, x, cand).float(), rr.score(U, x, cand, cnt, low).float(), atol=1e-2)


def test_open_set_validation_identifies_unseen_identities_disjoint_from_the_test(prepared):
    """`open_val_ids`: each validation identifies N more identities of the generator: none of them a training or a
    test identity (centres differ), the other splits' rows unchanged, and the number equals the test protocol run
    on those rows by hand (gallery: each probe identity's first sample and every distractor sample)."""
    import numpy as np

    from xcbench.data.faces import FaceModel
    from xcbench.metrics import topk_hit_rate
    from xcbench.model import build_model
    from xcbench.tasks.base import make_task

    processed, entry = prepared("synthetic-faces-tiny")
    base, fm = FaceModel(**entry["params"]), FaceModel(**entry["params"], n_open_val_ids=30)
    for s in ("train", "verif"):  # adding the split leaves the others' rows as they were
        assert np.array_equal(base.rows(s, np.arange(20)), fm.rows(s, np.arange(20)))
    vx, vy = fm.split_arrays("open_val")
    assert len(vx) == 30 * fm.per_id["open_val"] and vy.max() == 29
    cv = fm.centres(np.arange(fm.n_of["verif"], fm.n_of["verif"] + 30), verif=True)
    for other in (fm.centres(np.arange(fm.n_of["verif"]), verif=True), fm.centres(np.arange(fm.n_ids))):
        assert (cv @ other.T).max() < 0.999  # no open-set identity is a test (verification) or a training one
    model = build_model({"encoder": {"name": "mlp", "hidden": 8}}, "full_softmax", {}, fm.dim, fm.n_ids, 0).eval()
    cpu = torch.device("cpu")
    task = make_task({"task": {"name": "faces", "params": {"eval_train_size": 100, "open_val_ids": 30}}}, entry,
                     processed, None, cpu, 0)
    got = task.evaluate(model, "val")
    with torch.no_grad():
        E = torch.nn.functional.normalize(model.embed(torch.from_numpy(vx) * task.feature_scale), dim=1)
    y = torch.from_numpy(vy)
    first = torch.ones(len(y), dtype=torch.bool)
    first[1:] = y[1:] != y[:-1]
    probe = y < 15  # probe_share 0.5 of 30 identities
    g, q = (probe & first) | ~probe, probe & ~first
    assert got["ident_top1"] == pytest.approx(topk_hit_rate(E[q] @ E[g].T, y[q], y[g], 1))
    assert {"top1", "ce", "verif_tpr"} <= set(got)
    test = task.evaluate(model, "test")  # the test's numbers are those of its own identities
    assert test["ident_top1"] != got["ident_top1"] or test["verif_tpr"] != got["verif_tpr"]
    plain = make_task({"task": {"name": "faces", "params": {"eval_train_size": 100}}}, entry, processed, None, cpu, 0)
    assert "ident_top1" not in plain.evaluate(model, "val")  # off by default: no run's spec or history changes
