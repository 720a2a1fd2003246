"""Every registered sampler against its brute-force distribution; sampled softmax vs full softmax."""

import math

import pytest
import torch
import torch.nn.functional as F
from scipy.stats import chisquare

from xcbench.heads.sampled_softmax import sampled_softmax_loss
from xcbench.registry import SAMPLERS
from xcbench.samplers.base import proposal_kl

N, D = 40, 6


def _sampler(name):
    g = torch.Generator().manual_seed(0)
    s = SAMPLERS.get(name)(N, **({"D": 64} if name == "rff" else {}))
    s.setup(torch.randint(0, 50, (N,), generator=g))
    s.update(torch.nn.functional.normalize(torch.randn(N, D, generator=g), dim=1), g)
    return s


def _h(B=3):
    return torch.randn(B, D, generator=torch.Generator().manual_seed(1))


# Brute-force q(c | h) of every registered sampler, as a function of the queries h (B, d), the class
# embeddings E (n, d) and the training label counts N (n,): (B, n). A new sampler needs its entry.
def _kernel_probs(s, h, E):
    unit = torch.nn.functional.normalize
    k = (s.phi(unit(h.double(), dim=1)) @ s.phi(unit(E.double(), dim=1)).T).clamp(min=0)     # (B, n)
    return k / k.sum(1, keepdim=True)


REFERENCES = {
    "uniform": (lambda s, h, E, N: torch.full((h.shape[0], len(N)), 1.0 / len(N), dtype=torch.float64), {}),
    "unigram": (lambda s, h, E, N: ((N + 1.0) / (N + 1.0).sum()).double().expand(h.shape[0], -1), {}),
    "exact": (lambda s, h, E, N: torch.softmax(s.tau * h.double() @ E.double().T, 1), {"tau": 1.5}),
    "quadratic": (lambda s, h, E, N: _kernel_probs(s, h, E), {"alpha": 3.0}),
    # small bandwidth / degree weights: every kernel estimate positive, where the tree equals brute force
    "rff": (lambda s, h, E, N: _kernel_probs(s, h, E), {"D": 4096, "nu": 0.5}),
    "random_maclaurin": (lambda s, h, E, N: _kernel_probs(s, h, E), {"D": 4096, "tau": 0.3}),
    "midx_pq": (lambda s, h, E, N: _midx_probs(s, h, E, "pq"), {"K": 4, "tau": 2.0}),
    "midx_rq": (lambda s, h, E, N: _midx_probs(s, h, E, "rq"), {"K": 4, "tau": 2.0}),
    "quadratic_exact": (lambda s, h, E, N: _quadratic_brute(h, E, 3.0), {"alpha": 3.0}),
    "lsh": (lambda s, h, E, N: _lsh_brute(s, h, E), {"tables": 4, "bits": 5}),  # 32 buckets: some empty
    "midx_learn_pq": (lambda s, h, E, N: _midx_probs(s, h, E, "pq"), {"K": 4, "tau": 2.0}),
    "midx_learn_rq": (lambda s, h, E, N: _midx_probs(s, h, E, "rq"), {"K": 4, "tau": 2.0}),
    "midx_exact": (lambda s, h, E, N: torch.softmax(2.0 * h.double() @ E.double().T, 1), {"K": 4, "tau": 2.0}),
}


def _quadratic_brute(h, E, alpha):
    k = alpha * (F.normalize(h.double(), dim=1) @ F.normalize(E.double(), dim=1).T) ** 2 + 1
    return k / k.sum(1, keepdim=True)


def _lsh_brute(s, h, E):
    """Table by table: the classes sharing h's SimHash bucket, each table chosen uniformly among the
    tables where that bucket is non-empty, then a class uniformly in it."""
    q = torch.zeros(h.shape[0], len(E), dtype=torch.float64)
    for b in range(h.shape[0]):
        tables = []
        for t in range(s.L):
            bh = (s.P[t].double() @ h[b].double() > 0)                                      # (K,) h's bits
            same = ((E.double() @ s.P[t].double().T > 0) == bh).all(1)                      # (n,) colliding classes
            if same.any():
                tables.append(same.double() / same.sum())
        q[b] = torch.stack(tables).mean(0) if tables else torch.full((len(E),), 1.0 / len(E), dtype=torch.float64)
    return q


def _midx_probs(s, h, E, kind):
    """Theorem 2 by brute force from the fitted index: q_i ∝ exp(tau (quantized c_i) . h) over all classes."""
    h = h.double()
    if kind == "pq":
        d1 = s.U.shape[1]
        logit = h[:, :d1] @ s.U.double()[s.a].T + h[:, d1:] @ s.V.double()[s.b].T       # (B, n)
    else:
        logit = h @ (s.U.double()[s.a] + s.V.double()[s.b]).T
    # the index must be k-means of these embeddings: every class sits in its nearest codeword's cell
    first = E[:, : s.U.shape[1]] if kind == "pq" else E
    assert torch.equal(s.a, torch.cdist(first, s.U).argmin(1))
    return torch.softmax(s.tau * logit, 1)


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_log_prob_equals_brute_force_as_a_function_of_h_embeddings_and_counts(name):
    """Two queries sets x two embedding tables x two count vectors: the exact log q must follow each
    input (a sampler that ignores h, E or the counts fails on one of the pairs)."""
    assert name in REFERENCES, f"add a brute-force reference for sampler {name!r} to tests/test_samplers.py"
    ref, kw = REFERENCES[name]
    g = torch.Generator().manual_seed(7)
    hs = [torch.randn(3, D, generator=g) * 2 for _ in range(2)]
    Es = [torch.randn(N, D, generator=g) for _ in range(2)]
    Ns = [torch.randint(0, 50, (N,), generator=g) for _ in range(2)]
    seen = []
    for E in Es:
        for counts in Ns:
            s = SAMPLERS.get(name)(N, **kw)
            s.setup(counts)
            s.update(E, g)
            for h in hs:
                want = ref(s, h, E, counts)
                got = s.log_prob(h, torch.arange(N).expand(h.shape[0], -1)).double().exp()
                assert torch.allclose(got, want, atol=1e-4), f"{name}: log_prob differs from brute force"
                seen.append(want)
    # the references themselves depend on what the sampler must use: at least two distinct distributions
    assert any(not torch.allclose(seen[0], w) for w in seen[1:]) or name == "uniform"


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_log_prob_is_a_normalised_distribution(name):
    s, h = _sampler(name), _h()
    lp = s.log_prob(h, torch.arange(N).expand(h.shape[0], -1))
    assert torch.allclose(lp.double().exp().sum(1), torch.ones(h.shape[0], dtype=torch.float64), atol=1e-5)


@pytest.mark.parametrize("name", SAMPLERS.names())
def test_draws_follow_log_prob(name):
    s, h = _sampler(name), _h(1)
    ids, log_q = s.sample(h, 100_000, torch.Generator().manual_seed(2))
    assert ids.shape == (1, 100_000) and torch.allclose(log_q, s.log_prob(h, ids))
    counts = torch.bincount(ids[0], minlength=N).double()
    expected = s.log_prob(h, torch.arange(N).unsqueeze(0))[0].double().exp() * 100_000
    support = expected > 0  # a proposal may exclude classes (LSH: classes in no bucket of h)
    assert counts[~support].sum() == 0, f"{name}: drew classes of probability 0"
    counts, expected = counts[support], expected[support]
    assert chisquare(counts.numpy(), expected.numpy() * counts.sum().item() / expected.sum().item()).pvalue > 1e-3


@pytest.mark.parametrize("chunk", [None, 2])
@pytest.mark.parametrize("name", SAMPLERS.names())
def test_sample_with_targets_is_sample_then_log_prob_bit_for_bit(name, chunk):
    """`sample_with` (the head's `correct: both`) draws what `sample` draws from the same generator and gives the
    targets' log q that `log_prob` gives, to the last bit, whether or not the sampler scores once for both (the
    exact samplers, also query by query in chunks of 2 of the 5 rows)."""
    s = _sampler(name)
    if chunk is not None:
        if not hasattr(s, "chunk"):
            pytest.skip("no query chunks")
        s.chunk = chunk
    h = _h(5)
    targets = torch.randint(0, N, (5, 1), generator=torch.Generator().manual_seed(3))
    ids, log_q = s.sample(h, 7, torch.Generator().manual_seed(4))
    ids2, log_q2, log_q_t = s.sample_with(h, 7, torch.Generator().manual_seed(4), targets)
    assert torch.equal(ids2, ids) and torch.equal(log_q2, log_q)
    assert torch.equal(log_q_t, s.log_prob(h, targets)) and not log_q_t.requires_grad


def test_sampled_softmax_gradient_converges_to_full_softmax_with_exact_proposal():
    """E over draws of d loss / d o -> softmax(o) - onehot(t) as m grows, with q = softmax(o)."""
    g = torch.Generator().manual_seed(0)
    o = torch.randn(N, generator=g) * 2
    t = 3
    full = torch.softmax(o, 0) - torch.nn.functional.one_hot(torch.tensor(t), N)
    q = torch.softmax(o, 0)
    errors = {}
    for m in (5, 50, 500):
        acc = torch.zeros(N)
        R = 400
        for _ in range(R):
            ids = torch.multinomial(q, m, replacement=True, generator=g)
            oo = o.clone().requires_grad_(True)
            loss = sampled_softmax_loss(oo[t].unsqueeze(0), oo[ids].unsqueeze(0), q.log()[ids].unsqueeze(0),
                                        (ids == t).unsqueeze(0), m)
            loss.sum().backward()
            acc += oo.grad
        errors[m] = (acc / R - full).abs().sum().item()
    assert errors[500] < errors[50] < errors[5]
    assert errors[500] < 0.1


def test_log_q_correction_and_hit_masking():
    o_t, o_s = torch.tensor([1.0]), torch.tensor([[2.0, 0.5]])
    log_q = torch.log(torch.tensor([[0.25, 0.5]]))
    hits = torch.tensor([[False, True]])
    got = sampled_softmax_loss(o_t, o_s, log_q, hits, 2)
    want = -(1.0 - math.log(math.exp(1.0) + math.exp(2.0 - math.log(2 * 0.25))))
    assert got.item() == pytest.approx(want, abs=1e-6)


def _brute_kernel(s, h):
    ph = s.phi(torch.nn.functional.normalize(h, dim=1))
    k = ph @ s.phi_c.T                                                                  # (B, n)
    return k / k.sum(1, keepdim=True)


def test_quadratic_tree_equals_brute_force_kernel_distribution():
    s, h = _sampler("quadratic"), _h()
    ref = _brute_kernel(s, h)
    lp = s.log_prob(h, torch.arange(N).expand(h.shape[0], -1)).double().exp()
    assert torch.allclose(lp, ref.double(), atol=1e-5)
    assert torch.all(ref > 0) and s.phi_c.shape[1] == D * D + 1


def test_rff_kernel_estimate_and_positive_case_matches_brute_force():
    g = torch.Generator().manual_seed(3)
    x = torch.nn.functional.normalize(torch.randn(200, D, generator=g), dim=1)
    y = torch.nn.functional.normalize(torch.randn(200, D, generator=g), dim=1)
    s = SAMPLERS.get("rff")(N, D=20000, nu=2.0)
    est = (s.phi(x) * s.phi(y)).sum(1)
    target = torch.exp(-2.0 * (x - y).square().sum(1) / 2)
    assert (est - target).abs().max() < 0.05  # unbiased Monte-Carlo estimate, D = 20000
    s = SAMPLERS.get("rff")(N, D=4096, nu=0.5)  # small nu: all kernel values clearly positive
    s.update(torch.randn(N, D, generator=g), None)
    h = _h()
    ref = _brute_kernel(s, h)
    assert torch.all(ref > 0)
    lp = s.log_prob(h, torch.arange(N).expand(h.shape[0], -1)).double().exp()
    assert torch.allclose(lp, ref.double(), atol=1e-4)


@pytest.mark.parametrize("changed", [3, N // 2])  # path updates; more than n / 4 rows: a whole rebuild
def test_tree_row_update_equals_rebuild(changed):
    g = torch.Generator().manual_seed(4)
    E = torch.randn(N, D, generator=g)
    s = _sampler("quadratic")
    s.update(E, None)
    ids = torch.randperm(N, generator=g)[:changed]
    E2 = E.clone()
    E2[ids] = torch.randn(changed, D, generator=g)
    s.update_rows(ids, E2[ids])
    fresh = _sampler("quadratic")
    fresh.update(E2, None)
    h = _h()
    all_ids = torch.arange(N).expand(h.shape[0], -1)
    assert torch.allclose(s.log_prob(h, all_ids), fresh.log_prob(h, all_ids), atol=1e-5)


def test_a_rebuild_reuses_the_leaf_buffer_without_keeping_old_rows():
    """update() keeps its (2^depth, D) leaf buffer from one rebuild to the next (RFF rebuilds every PTB step): a
    rebuilt tree, after path updates and an earlier tree, equals a fresh sampler's tree bit for bit."""
    g = torch.Generator().manual_seed(6)
    n = 37  # 64 leaves: 27 padding leaves that must stay 0
    s, fresh = (SAMPLERS.get("rff")(n, D=32, nu=0.5) for _ in range(2))
    s.update(torch.randn(n, D, generator=g))
    s.update_rows(torch.tensor([1, 8, 30]), torch.randn(3, D, generator=g))
    E2 = torch.randn(n, D, generator=g)
    s.update(E2)
    fresh.update(E2)
    assert all(torch.equal(a, b) for a, b in zip(s.left[1:], fresh.left[1:])) and torch.equal(s.root, fresh.root)
    assert torch.equal(s._leaves[n:], torch.zeros(64 - n, 64))


def test_rff_features_fixed_until_reseeded():
    s = SAMPLERS.get("rff")(N, D=64)
    z = torch.nn.functional.normalize(torch.randn(5, D), dim=1)
    a, b = s.phi(z), s.phi(z)
    assert torch.equal(a, b)
    s.reseed(1)
    assert not torch.equal(a, s.phi(z))


def test_midx_exact_decomposition_equals_softmax_and_midx_draws_only_nonempty_cells():
    g = torch.Generator().manual_seed(11)
    E, h = torch.randn(300, 8, generator=g, dtype=torch.float64), torch.randn(5, 8, generator=g, dtype=torch.float64)
    s = SAMPLERS.get("midx_exact")(300, K=6, tau=1.5)
    s.update(E, g)
    lp = s.stages(h)                                         # P(k, l) P(i | k, l), stage by stage
    assert (lp.exp() - torch.softmax(1.5 * h @ E.T, 1)).abs().max() < 1e-6
    pq = SAMPLERS.get("midx_pq")(300, K=6)
    pq.update(E, g)
    ids, _ = pq.sample(h, 2000, g)
    assert (pq.count[pq.a[ids] * 6 + pq.b[ids]] > 0).all()


@pytest.mark.parametrize("name", ["midx_pq", "midx_rq", "midx_learn_pq", "midx_learn_rq"])
def test_midx_staged_draws_follow_the_same_proposal_as_the_cells(name):
    """`draw: stages` (codeword k, then l given k, then a class in the cell) is Theorem 2's proposal: its log q
    equals brute force and the `cells` form's on the same index, two queries' draws follow it (chi-square per
    query, cells of unequal sizes and empty ones: K = 6 over 40 classes), only non-empty cells are drawn, and
    `sample_with`'s log q are `sample`'s draws and `log_prob`'s, bit for bit."""
    ref, kw = REFERENCES[name]
    kw = {**kw, "K": 6}
    g = torch.Generator().manual_seed(5)
    E, h = torch.randn(N, D, generator=g), torch.randn(2, D, generator=g) * 2
    cells = SAMPLERS.get(name)(N, **kw)
    cells.update(E, torch.Generator().manual_seed(6))
    s = SAMPLERS.get(name)(N, **kw, draw="stages")
    s.update(E, torch.Generator().manual_seed(6))
    assert torch.equal(s.a, cells.a) and torch.equal(s.b, cells.b) and (s.count == 0).any()
    every = torch.arange(N).expand(2, -1)
    q = s.log_prob(h, every).double().exp()
    assert torch.allclose(q, ref(s, h, E, None), atol=1e-5)
    assert torch.allclose(s.log_prob(h, every), cells.log_prob(h, every), atol=1e-5)
    ids, log_q = s.sample(h, 100_000, torch.Generator().manual_seed(7))
    assert torch.equal(log_q, s.log_prob(h, ids)) and (s.count[s.a[ids] * s.K + s.b[ids]] > 0).all()
    for row in range(2):
        counts = torch.bincount(ids[row], minlength=N).double()
        support = q[row] > 1e-12
        assert counts[~support].sum() == 0
        want = q[row][support] / q[row][support].sum() * 100_000
        assert chisquare(counts[support].numpy(), want.numpy()).pvalue > 1e-3
    t = torch.randint(0, N, (2, 1), generator=g)
    ids2, log_q2, log_q_t = s.sample_with(h, 7, torch.Generator().manual_seed(8), t)
    ids1, log_q1 = s.sample(h, 7, torch.Generator().manual_seed(8))
    assert torch.equal(ids2, ids1) and torch.equal(log_q2, log_q1) and torch.equal(log_q_t, s.log_prob(h, t))
    with pytest.raises(ValueError, match="draw = 'stage'.*cells"):
        SAMPLERS.get(name)(N, draw="stage")


def test_midx_codebooks_warm_start_and_survive_a_checkpoint():
    g = torch.Generator().manual_seed(12)
    E = torch.randn(200, 6, generator=g)
    s = SAMPLERS.get("midx_rq")(200, K=5)
    s.update(E, g)
    U = s.U.clone()
    s.update(E, None)                                        # same embeddings, warm start: converged at once
    assert torch.equal(s.U, U)
    fresh = SAMPLERS.get("midx_rq")(200, K=5)
    fresh.load_state_dict(s.state_dict())
    fresh.update(E, None)                                    # rebuilt from the checkpointed codebooks
    h = torch.randn(3, 6, generator=g)
    ids = torch.arange(200).expand(3, -1)
    assert torch.equal(fresh.log_prob(h, ids), s.log_prob(h, ids))


def _proposal_kl(s, h, E, tau):
    return proposal_kl(s, h, lambda hb: tau * hb.double() @ E.double().T)[0].mean().item()


@pytest.mark.parametrize("name", ["midx_learn_pq", "midx_learn_rq"])
def test_learnable_codebooks_lower_the_proposal_kl(name):
    """Training only the codewords on the aux loss (reconstruction + KL) moves the MIDX proposal
    towards the softmax: its exact KL(softmax || q) on the training queries falls (by 7-12% here, K = 4);
    with the KL term off (reconstruction alone: online k-means from a k-means optimum) it does not."""
    g = torch.Generator().manual_seed(0)
    E = torch.randn(300, 8, generator=g)
    h = torch.randn(128, 8, generator=g)
    kl = {}
    for w in (1.0, 0.0):
        s = SAMPLERS.get(name)(300, K=4, tau=2.0, chunk=300, queries=128, kl_weight=w, codeword_lr=0.02)
        s.update(E, torch.Generator().manual_seed(1))
        before = _proposal_kl(s, h, E, 2.0)
        for _ in range(300):
            s.fit_step(h, E)
        s.update(E, None)  # re-assign the classes to the learned codewords
        kl[w] = _proposal_kl(s, h, E, 2.0) / before
    assert kl[1.0] < 0.95 and kl[1.0] < kl[0.0] - 0.05, kl


@pytest.mark.parametrize("name", ["midx_learn_pq", "midx_learn_rq"])
def test_learnable_codewords_take_exact_adam_steps_of_their_own(name):
    """fit_step is Adam on the aux loss, step for step the same as torch.optim.Adam on copies of the
    codewords (a dropped bias correction or moment fails it), and the codewords are buffers: no
    model optimizer or gradient clip sees them."""
    g = torch.Generator().manual_seed(0)
    E, h = torch.randn(60, 6, generator=g), torch.randn(16, 6, generator=g)
    s = SAMPLERS.get(name)(60, K=3, chunk=20, queries=16, codeword_lr=0.05)
    s.update(E, torch.Generator().manual_seed(1))
    assert list(s.parameters()) == []
    ref = SAMPLERS.get(name)(60, K=3, chunk=20, queries=16)
    ref.load_state_dict(s.state_dict())
    ref.a, ref.b = s.a.clone(), s.b.clone()
    U, V = ref.U.clone().requires_grad_(), ref.V.clone().requires_grad_()
    opt = torch.optim.Adam([U, V], lr=0.05)
    for _ in range(5):
        s.fit_step(h, E)
        ref.U, ref.V = U, V  # the reference's loss through the optimised copies
        opt.zero_grad()
        ref.aux_loss(h, E).backward()
        opt.step()
    assert torch.allclose(s.U, U, atol=1e-6) and torch.allclose(s.V, V, atol=1e-6)
    assert not torch.allclose(s.U, ref.fit_codebooks(E, torch.Generator().manual_seed(1))[0])  # they moved


def test_learnable_codebooks_and_their_moments_survive_a_checkpoint():
    g = torch.Generator().manual_seed(0)
    E = torch.randn(50, 6, generator=g)
    s = SAMPLERS.get("midx_learn_rq")(50, K=3)
    s.update(E, g)
    s.fit_step(torch.randn(4, 6, generator=g), E)
    t = SAMPLERS.get("midx_learn_rq")(50, K=3)
    t.load_state_dict(s.state_dict())
    for k in ("U", "V", "mU", "vU", "mV", "vV", "steps"):
        assert torch.equal(getattr(t, k), getattr(s, k)), k
    assert s.vU.abs().sum() > 0


@pytest.mark.parametrize("name,kind", [("midx_pq", "pq"), ("midx_rq", "rq")])
def test_midx_fitted_on_a_sample_of_classes_still_matches_brute_force(name, kind):
    """Above points_per_codeword * K classes, Lloyd runs on a drawn subset; every class is then
    assigned to its nearest codeword, and log q is still Theorem 2's exact distribution."""
    g = torch.Generator().manual_seed(3)
    E, h = torch.randn(N, D, generator=g), torch.randn(4, D, generator=g)
    s = SAMPLERS.get(name)(N, K=4, tau=2.0, points_per_codeword=2)
    assert s._fit_rows(N, g, E.device) is not None and len(s._fit_rows(N, g, E.device)) == 8
    s.update(E, g)
    got = s.log_prob(h, torch.arange(N).expand(4, -1)).double().exp()
    assert torch.allclose(got, _midx_probs(s, h, E, kind), atol=1e-5)


def test_residual_quantization_reconstructs_better_than_product():
    """Same embeddings, same K: the rq index's quantized embeddings are closer to the classes than pq's
    (the paper's reason for MIDX-rq's lower bias)."""
    g = torch.Generator().manual_seed(5)
    E = torch.randn(2000, 16, generator=g) @ torch.randn(16, 16, generator=g)  # correlated dimensions
    err = {}
    for name in ("midx_pq", "midx_rq"):
        s = SAMPLERS.get(name)(2000, K=8)
        s.update(E, torch.Generator().manual_seed(0))
        err[name] = (E - s.quantized()).square().sum(1).mean().item()
    assert err["midx_rq"] < err["midx_pq"], err


def test_xmc_sampled_head_with_exact_proposal_approaches_the_full_softmax_gradient():
    """The sampled_softmax head on a padded multi-label XMC row (one positive) with q = softmax(h E^T):
    the mean gradient of E over draws tends to the full-softmax gradient as m grows."""
    from xcbench.registry import HEADS

    n, d = 40, 6
    g = torch.Generator().manual_seed(3)
    h = torch.randn(1, d, generator=g)
    y = torch.tensor([[7, -1, -1]])                                                       # padded XMC row
    errs = {}
    for m in (4, 400):
        head = HEADS.get("sampled_softmax")(d, n, torch.Generator().manual_seed(0), sampler="exact", m=m,
                                            normalize=False, init_std=0.5)
        head.setup({"label_counts": torch.ones(n, dtype=torch.long), "n_train": 1})
        head.on_epoch_start(0, g)
        E = head.E
        full = torch.autograd.grad(torch.nn.functional.cross_entropy(h @ E.T, torch.tensor([7])), E)[0]
        acc = torch.zeros_like(full)
        for _ in range(200):
            acc += torch.autograd.grad(head.loss(h, y, None, g), E)[0]
        errs[m] = (acc / 200 - full).abs().sum().item()
    assert errs[400] < 0.25 * errs[4] and errs[400] < 0.05 * full.abs().sum().item() + 0.02


def test_both_corrected_with_uniform_proposal_is_plain_negative_sampling():
    """correct: both (the MIDX reference's loss) with q = 1/n: the corrections cancel."""
    from xcbench.heads.sampled_softmax import SampledSoftmax
    g = torch.Generator().manual_seed(5)
    head = SampledSoftmax(D, N, g, sampler="uniform", m=7, correct="both")
    h, y = torch.randn(16, D, generator=g), torch.randint(0, N, (16,), generator=g)
    got = head.loss(h, y, None, torch.Generator().manual_seed(9))
    ids, _ = head.sampler.sample(h, 7, torch.Generator().manual_seed(9))
    o_t, o_s = (h * head.E[y]).sum(1), torch.einsum("bd,bmd->bm", h, head.E[ids])
    want = -torch.log_softmax(torch.cat([o_t.unsqueeze(1), o_s.masked_fill(ids == y.unsqueeze(1), -math.inf)], 1), 1)[:, 0]
    assert got.item() == pytest.approx(want.mean().item(), rel=1e-5)
    negatives = SampledSoftmax(D, N, torch.Generator().manual_seed(5), sampler="uniform", m=7)
    assert negatives.loss(h, y, None, torch.Generator().manual_seed(9)).item() != pytest.approx(got.item(), rel=1e-3)


def test_kept_hits_stay_among_the_negatives():
    """hits: keep (the MIDX code's loss) leaves a drawn target in the row's denominator; mask drops it."""
    from xcbench.heads.sampled_softmax import SampledSoftmax
    g = torch.Generator().manual_seed(5)
    keep = SampledSoftmax(D, N, g, sampler="uniform", m=7, correct="both", hits="keep")
    h, y = torch.randn(16, D, generator=g), torch.randint(0, N, (16,), generator=g)
    got = keep.loss(h, y, None, torch.Generator().manual_seed(9))
    ids, _ = keep.sampler.sample(h, 7, torch.Generator().manual_seed(9))
    assert (ids == y.unsqueeze(1)).any()  # the draw has a hit to keep
    o_t, o_s = (h * keep.E[y]).sum(1), torch.einsum("bd,bmd->bm", h, keep.E[ids])
    want = -torch.log_softmax(torch.cat([o_t.unsqueeze(1), o_s], 1), 1)[:, 0]
    assert got.item() == pytest.approx(want.mean().item(), rel=1e-5)
    mask = SampledSoftmax(D, N, torch.Generator().manual_seed(5), sampler="uniform", m=7, correct="both")
    assert mask.loss(h, y, None, torch.Generator().manual_seed(9)).item() < got.item() - 1e-4
    with pytest.raises(ValueError, match="hits"):
        SampledSoftmax(D, N, torch.Generator().manual_seed(5), hits="drop")


def _binomial_mean(f, m: int, p: float) -> float:
    """E[f(k)] for k ~ Bin(m, p), summed exactly over k = 0..m."""
    k = torch.arange(m + 1, dtype=torch.float64)
    pmf = torch.distributions.Binomial(m, probs=torch.tensor(p, dtype=torch.float64)).log_prob(k).exp()
    return float((pmf * f(k)).sum())


# the weight w(p_t) of an example's expected gradient, w (p - e_t), with q = softmax(o); k ~ Bin(m, 1 - p_t) misses
HIT_WEIGHTS = {
    ("both", "keep"): lambda m, pt: m / (m + 1),
    ("both", "mask"): lambda m, pt: _binomial_mean(lambda k: k / (1 + k), m, 1 - pt) / (1 - pt),
    ("negatives", "keep"): lambda m, pt: 1 / (1 + pt),
    ("negatives", "mask"): lambda m, pt: _binomial_mean(lambda k: k / (m * pt + k), m, 1 - pt) / (1 - pt),
}


@pytest.mark.parametrize("correct,hits", sorted(HIT_WEIGHTS))
def test_corrections_with_exact_proposal_follow_their_closed_form_gradients(correct, hits):
    """q = softmax(o): E[d loss / d o] = w(p_t) (p - e_t), the full softmax's direction for every m, each example
    weighted by a closed form (heads/sampled_softmax.py): `both` keeping hits m/(m+1) for all, masking them up to
    m/2 for a confident target; `negatives` keeping 1/(1 + p_t), masking about 1. A confident target (p_t = 0.72)
    and a rare one, so that a masked hit and a kept one give different weights."""
    g = torch.Generator().manual_seed(0)
    o = torch.randn(N, generator=g) * 2
    o[3] += 7.0
    q = torch.softmax(o, 0)
    for t in (3, 11):
        full = q - F.one_hot(torch.tensor(t), N)
        for m in (5, 200):
            R = 4000
            ids = torch.multinomial(q.expand(R, N), m, replacement=True, generator=g)         # (R, m)
            oo = o.expand(R, N).clone().requires_grad_(True)
            lq = q.log()[ids]
            log_q_t = q.log()[t].expand(R) if correct == "both" else None
            mask = ids == t if hits == "mask" else torch.zeros_like(ids, dtype=torch.bool)
            sampled_softmax_loss(oo[:, t], oo.gather(1, ids), lq, mask, m, log_q_t).sum().backward()
            want = full * HIT_WEIGHTS[correct, hits](m, float(q[t]))
            assert (oo.grad.mean(0) - want).abs().max() < 0.02 * max(1.0, want.abs().max()), (t, m)


def test_masked_hits_under_both_overweight_confident_targets():
    """The closed forms' ends: `both` with masked hits weighs a target the softmax already gives 0.99 about
    (m+1)/2 times one it gives 0.01; keeping them weighs both alike; `negatives` with masking stays near 1."""
    m = 20
    w = HIT_WEIGHTS["both", "mask"]
    assert w(m, 0.01) == pytest.approx(m / (m + 1), rel=0.02)
    assert w(m, 0.999) == pytest.approx(m / 2, rel=0.05)
    assert HIT_WEIGHTS["both", "keep"](m, 0.999) == HIT_WEIGHTS["both", "keep"](m, 0.01)
    assert all(0.95 < HIT_WEIGHTS["negatives", "mask"](m, p) <= 1.0 + 1e-9 for p in (0.01, 0.3, 0.7, 0.99))


def test_quadratic_by_scores_is_the_trees_distribution_and_draws_from_it():
    """draw: scores (every class scored, no tree) gives the tree's log q exactly, its draws follow it
    (chi-square), and row updates keep it equal to a fresh build; auto picks by the counted cost."""
    g = torch.Generator().manual_seed(5)
    E = torch.randn(N, D, generator=g)
    tree, scores = SAMPLERS.get("quadratic")(N, alpha=3.0), SAMPLERS.get("quadratic")(N, alpha=3.0, draw="scores")
    tree.update(E, None)
    scores.update(E, None)
    h, ids = _h(), torch.arange(N).expand(3, -1)
    assert scores.left == [] and torch.allclose(scores.log_prob(h, ids), tree.log_prob(h, ids), atol=1e-5)
    assert torch.allclose(scores.log_prob(h, ids).double().exp(), _quadratic_brute(h, E, 3.0), atol=1e-5)
    drawn, log_q = scores.sample(h[:1].expand(20000, -1), 1, torch.Generator().manual_seed(6))
    assert torch.allclose(log_q[:, 0], scores.log_prob(h[:1], drawn.T).squeeze(0))
    p = scores.log_prob(h[:1], ids[:1]).double().exp().squeeze(0)
    p = p / p.sum()
    assert chisquare(torch.bincount(drawn.flatten(), minlength=N).numpy(), (p * 20000).numpy()).pvalue > 1e-3
    rows = torch.tensor([1, 7, 30])
    E2 = E.clone()
    E2[rows] = torch.randn(3, D, generator=g)
    scores.update_rows(rows, E2[rows])
    tree.update(E2, None)
    assert torch.allclose(scores.log_prob(h, ids), tree.log_prob(h, ids), atol=1e-5)
    auto = SAMPLERS.get("quadratic")(10_000, draw="auto")
    auto.draws = 100
    assert auto.scores_cheaper(10_000, 200) and not auto.scores_cheaper(10 ** 6, 64)  # PTB; 10^6 classes, d = 64
    # WikiLSHTC-325K at d = 128: the walk alone (31M) is below the scores (42M), walk and path refresh (62M) are not
    assert auto.scores_cheaper(325_056, 128) and not auto.scores_cheaper(530_000, 128)
    with pytest.raises(ValueError, match="draw must be one of"):
        SAMPLERS.get("quadratic")(N, draw="brute")


def test_quadratic_exact_in_place_form_keeps_the_kept_runs_draws_bit_for_bit():
    """`quadratic_exact` (MIDX Table 4's Sphere) computes alpha (h^.c^)^2 + 1, k / sum and log in place; kept runs
    were drawn from the out-of-place form, so its probabilities, draws and log q must stay the same bits."""
    g = torch.Generator().manual_seed(3)
    n, d, alpha = 500, 16, 100.0
    E, h = torch.randn(n, d, generator=g), torch.randn(7, d, generator=g)
    s = SAMPLERS.get("quadratic_exact")(n, alpha=alpha)
    s.update(E, g)
    k = alpha * (F.normalize(h, dim=1) @ F.normalize(E, dim=1).T).square() + 1.0                    # the old form
    logp = (k / k.sum(1, keepdim=True)).log()
    ids, log_q = s.sample(h, 50, torch.Generator().manual_seed(5))
    assert torch.equal(ids, torch.multinomial(logp.exp(), 50, replacement=True, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(log_q, logp.gather(1, ids))
    assert torch.equal(s.log_prob(h, ids), logp.gather(1, ids))


@pytest.mark.parametrize("name, kw", [("exact", {"tau": 2.0}), ("quadratic_exact", {"alpha": 100.0})])
def test_exact_samplers_in_query_chunks_draw_the_same_classes_with_the_same_log_q(name, kw):
    """`chunk`: the scores of `chunk` queries at a time (37 = 10 + 10 + 10 + 7 rows: a short last chunk). torch's
    CPU multinomial draws row after row from the generator, so the draws are the unchunked ones exactly; log q
    agrees to rounding (each chunk's product rounds alone), for the draws and for any given ids."""
    g = torch.Generator().manual_seed(6)
    E, h = torch.randn(300, 8, generator=g), torch.randn(37, 8, generator=g)
    whole, chunked = SAMPLERS.get(name)(300, **kw), SAMPLERS.get(name)(300, chunk=10, **kw)
    for s in (whole, chunked):
        s.update(E, None)
    (i0, l0), (i1, l1) = (s.sample(h, 5, torch.Generator().manual_seed(0)) for s in (whole, chunked))
    assert torch.equal(i1, i0)
    torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-6)
    ids = torch.randint(0, 300, (37, 4), generator=g)
    torch.testing.assert_close(chunked.log_prob(h, ids), whole.log_prob(h, ids), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="chunk"):
        SAMPLERS.get(name)(300, chunk=0, **kw)
