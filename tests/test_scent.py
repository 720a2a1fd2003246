"""SCENT family (book section 6.3): closed forms against numeric references, numerics, sparsity."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar

from xcbench.heads.minmin import MinMinCE
from xcbench.optim.duals import DUALS, SCENT, SOX, logmeanexp, scent_step
from xcbench.optim.row_sgd import RowSGD


def _R(seed=0, B=9, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    R = torch.randn(B, B, generator=g, dtype=torch.float64) * scale
    mask = ~torch.eye(B, dtype=torch.bool)
    return R, mask


@pytest.mark.parametrize("alpha", [0.01, 0.5, 3.0, 100.0])
@pytest.mark.parametrize("nu_prev", [-3.0, 0.0, 2.5])
def test_scent_closed_form_is_the_proximal_argmin(alpha, nu_prev):
    R, mask = _R()
    nu0 = torch.full((R.shape[0],), nu_prev, dtype=torch.float64)
    got = SCENT(alpha).update(nu0, R, mask)
    for i in range(R.shape[0]):
        m = torch.exp(R[i][mask[i]]).mean().item()

        def objective(nu):  # mean_j exp(R_ij - nu) + nu + (1/alpha) D_phi(nu, nu_prev),  phi = e^-nu
            bregman = math.exp(-nu) - math.exp(-nu_prev) + math.exp(-nu_prev) * (nu - nu_prev)
            return m * math.exp(-nu) + nu + bregman / alpha

        ref = minimize_scalar(objective, bracket=(-20, 20), tol=1e-12).x
        assert got[i].item() == pytest.approx(ref, abs=1e-6)


def test_min_over_nu_of_minmin_objective_is_cross_entropy():
    """With all K classes as 'negatives', min_nu {(1/K) sum_j exp(R_ij - nu) + nu - 1} + log K = CE."""
    g = torch.Generator().manual_seed(1)
    K, d = 30, 4
    W, h = torch.randn(K, d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    y = 7
    o = W @ h
    ce = (torch.logsumexp(o, 0) - o[y]).item()
    R = (o - o[y]).numpy()
    res = minimize_scalar(lambda nu: np.exp(R - nu).mean() + nu - 1, bracket=(-10, 10), tol=1e-12)
    assert res.fun + math.log(K) == pytest.approx(ce, abs=1e-9)
    # and the SCENT iteration with a large step reaches the minimiser nu* = log mean exp R
    Rt = torch.from_numpy(R).unsqueeze(0)
    mask = torch.ones_like(Rt, dtype=torch.bool)
    nu = torch.zeros(1, dtype=torch.float64)
    for _ in range(3):
        nu = SCENT(1e8).update(nu, Rt, mask)
    assert nu.item() == pytest.approx(res.x, abs=1e-6)


@pytest.mark.parametrize("rule", sorted(DUALS.names()))
@pytest.mark.parametrize("r_val,nu_val", [(80.0, -80.0), (-80.0, 80.0), (80.0, 80.0), (-80.0, -80.0)])
def test_no_inf_or_nan_at_extremes(rule, r_val, nu_val):
    params = {"scent": {"alpha": 1e5}, "sox": {"gamma": 0.1}, "sgd_dual": {"lr": 0.5}, "bsgd": {},
              "umax": {"lr": 0.5, "delta": 1.0}, "asgd_softplus": {"lr": 0.5, "rho": 1e-3}}[rule]
    R, mask = _R(scale=1.0)
    R = R + r_val
    nu = torch.full((R.shape[0],), nu_val, dtype=torch.float64)
    r = DUALS.get(rule)(**params)
    new = r.update(nu, R, mask)
    assert torch.isfinite(new).all()
    assert torch.isfinite(r.loss(R, mask, new)).all()


@pytest.mark.parametrize("rule", ["scent", "sox", "sgd_dual", "umax", "asgd_softplus"])
def test_update_reads_the_lme_it_is_handed_as_the_one_it_would_compute(rule):
    """The head hands each rule logmeanexp(R, mask) (one masked log-sum-exp a step): the same bits as the rule's own;
    a rule that uses lme moves with the lme handed to it."""
    R, mask = _R(3)
    nu = torch.linspace(-1.0, 2.0, R.shape[0], dtype=torch.float64)
    r = DUALS.get(rule)()
    lme = logmeanexp(R, mask)
    assert torch.equal(r.update(nu, R, mask, lme), r.update(nu, R, mask))
    if rule != "asgd_softplus":  # its step has no log-mean-exp
        assert not torch.equal(r.update(nu, R, mask, lme + 0.5), r.update(nu, R, mask))


def test_sox_is_a_moving_average_and_scent_with_a_coupled_step():
    R, mask = _R(2)
    nu = torch.linspace(-2, 2, R.shape[0], dtype=torch.float64)
    g = 0.3
    sox = SOX(g, schedule="constant").update(nu, R, mask)
    m = torch.exp(logmeanexp(R, mask))
    assert torch.allclose(torch.exp(sox), (1 - g) * torch.exp(nu) + g * m)   # the reference's update
    for i in range(R.shape[0]):  # = SCENT with alpha_i = g/(1-g) e^-nu_i, one example at a time
        one = SCENT(g / (1 - g) * math.exp(-nu[i].item())).update(nu[i:i + 1], R[i:i + 1], mask[i:i + 1])
        assert sox[i].item() == pytest.approx(one.item(), abs=1e-12)
    # the book's alpha = gamma e^-nu is the weight gamma / (1 + gamma)
    gb = 0.5
    assert torch.allclose(SOX(gb / (1 + gb), schedule="constant").update(nu, R, mask),
                          scent_step(nu, logmeanexp(R, mask), math.log(gb) - nu))
    # weight 1 resets nu to log m (the schedule's first value)
    assert torch.allclose(SOX(1.0, schedule="constant").update(nu, R, mask), torch.log(m))


def test_sox_gamma_follows_the_reference_cosine_schedule():
    """g_t = g_T + (1 - g_T)(1 + cos(pi t/T))/2 for t = 1..T, hand-computed for T = 4, g_T = 1e-5."""
    sox = SOX(1e-5)
    expected = {1: 0.8535548551, 2: 0.500005, 3: 0.1464551449, 4: 1e-5}
    for t, g in expected.items():
        sox.set_progress(t, 4)
        assert sox.gamma == pytest.approx(g, rel=1e-9)
    # the head advances it from the step counter: step 20 with 10 steps per epoch starts epoch 3
    head = MinMinCE(3, 10, torch.Generator().manual_seed(0), dual="sox", dual_params={"gamma": 1e-5})
    head.setup({"n_train": 40, "epochs": 4, "steps_per_epoch": 10, "batch_size": 4})
    head.on_epoch_start(20, None)
    assert head.rule.gamma == pytest.approx(expected[3], rel=1e-9)
    assert SOX(0.2, schedule="constant").gamma == 0.2


def test_a_shorter_run_follows_the_first_epochs_of_the_papers_schedules():
    """`schedule_epochs` (the dual's) and `cosine: {epochs}` (W's learning rate) keep a schedule's length: epoch 3
    of a 4-epoch run set to an 8-epoch schedule gets the 8-epoch values, not the compressed ones."""
    from xcbench.schedules import Cosine

    head = MinMinCE(3, 10, torch.Generator().manual_seed(0), dual="sox", dual_params={"gamma": 1e-5}, schedule_epochs=8)
    head.setup({"n_train": 40, "epochs": 4, "steps_per_epoch": 10, "batch_size": 4})
    head.on_epoch_start(20, None)
    ref = SOX(1e-5)
    ref.set_progress(3, 8)
    assert head.rule.gamma == pytest.approx(ref.gamma, rel=1e-12) and head.rule.gamma > 0.6
    assert Cosine(1.0, epochs=8).lr_at(2, 4) == pytest.approx(0.5 * (1 + math.cos(math.pi * 2 / 8)))
    assert Cosine(1.0).lr_at(2, 4) == pytest.approx(0.5)


def test_umax_steps_then_resets_nu_that_fell_more_than_delta_below():
    R = torch.log(torch.tensor([[2.0, 4.0], [2.0, 4.0], [1.0, 1.0]], dtype=torch.float64))   # m = 3, 3, 1
    mask = torch.ones_like(R, dtype=torch.bool)
    nu = torch.tensor([-1.0, math.log(3.0) - 0.5, 5.0], dtype=torch.float64)
    rule = DUALS.get("umax")(lr=0.1, delta=1.0, schedule="constant")
    got = rule.update(nu, R, mask)
    # step: nu - 0.1 (1 - m e^-nu) = -1 + 0.1 (3e - 1) = -0.28, log 3 - 0.5 - 0.1 (1 - e^0.5), 5 - 0.1 (1 - e^-5)
    step1 = math.log(3.0) - 0.5 - 0.1 * (1 - math.exp(0.5))
    assert got[0].item() == pytest.approx(math.log(3.0))     # -0.28 < log 3 - 1 = 0.10: reset to log m
    assert got[1].item() == pytest.approx(step1)              # within delta: kept
    assert got[2].item() == pytest.approx(5 - 0.1 * (1 - math.exp(-5.0)))
    assert rule.loss_at_updated


def test_asgd_softplus_against_hand_computed_update_and_loss():
    R = torch.log(torch.tensor([[1.0, 3.0]], dtype=torch.float64))
    mask = torch.ones_like(R, dtype=torch.bool)
    nu = torch.zeros(1, dtype=torch.float64)
    rule = DUALS.get("asgd_softplus")(lr=0.1, rho=0.5, schedule="constant")
    # s = z / (1 + rho z) = 1/1.5, 3/2.5; nu' = 0 - 0.1 (1 - mean s)
    assert rule.update(nu, R, mask).item() == pytest.approx(-0.1 * (1 - (1 / 1.5 + 3 / 2.5) / 2), abs=1e-12)
    assert rule.loss(R, mask, nu).item() == pytest.approx((math.log(1.5) + math.log(2.5)) / 2 / 0.5, abs=1e-12)
    # the step is a gradient step on f(nu) = nu + (1/rho) mean_j log(1 + rho e^(R_j - nu))
    f = lambda v: v + rule.loss(R, mask, torch.tensor([v], dtype=torch.float64)).item()  # noqa: E731
    grad = (f(1e-6) - f(-1e-6)) / 2e-6
    assert rule.update(nu, R, mask).item() == pytest.approx(-0.1 * grad, abs=1e-8)
    assert not rule.loss_at_updated


@pytest.mark.parametrize("rule,params", [("sgd_dual", {"lr": 0.7}), ("umax", {"lr": 0.7, "delta": 1.0}),
                                         ("asgd_softplus", {"lr": 0.7, "rho": 0.01})])
def test_sgd_rules_decay_their_step_by_cosine_to_zero(rule, params):
    r = DUALS.get(rule)(**params)
    r.set_progress(2, 4)
    assert r.lr == pytest.approx(0.35)
    r.set_progress(4, 4)
    assert r.lr == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("rule,params", [("sgd_dual", {"lr": 0.3, "schedule": "constant"}),
                                         ("scent", {"alpha": 2.0}), ("sox", {"gamma": 0.4, "schedule": "constant"})])
def test_head_initialises_nu_at_first_visit_and_reads_the_rules_nu_in_the_loss(rule, params):
    """First visit: nu = logmeanexp R (the reference code); later: the rule's update; the W-loss reads
    the updated nu for SCENT/SOX and the old one for SGD on the dual."""
    g = torch.Generator().manual_seed(4)
    head = MinMinCE(3, 12, g, dual=rule, dual_params=params, init_std=1.0)
    head.setup({"n_train": 6})
    h, y, idx = torch.randn(6, 3, generator=g), torch.tensor([0, 3, 5, 7, 9, 11]), torch.arange(6)
    R, mask = head.shifted_logits(h, y)
    R = R.detach()
    lme = logmeanexp(R, mask)
    loss1 = head.loss(h, y, idx, None)
    assert torch.allclose(head.nu, lme) and head.seen.all()
    assert loss1.item() == pytest.approx(head.rule.loss(R, mask, lme).mean().item(), rel=1e-6)
    h2 = 1.5 * h  # other logits on the second visit, so the old and the updated nu differ
    R2 = head.shifted_logits(h2, y)[0].detach()
    loss2 = head.loss(h2, y, idx, None)
    new = head.rule.update(lme, R2, mask)
    assert torch.allclose(head.nu, new) and not torch.allclose(new, lme)
    read = new if head.rule.loss_at_updated else lme
    assert loss2.item() == pytest.approx(head.rule.loss(R2, mask, read).mean().item(), rel=1e-6)
    zero = MinMinCE(3, 12, torch.Generator().manual_seed(4), dual=rule, dual_params=params, nu_init="zero")
    zero.setup({"n_train": 6})
    zero.loss(h, y, idx, None)
    Rz, _ = zero.shifted_logits(h, y)
    assert torch.allclose(zero.nu, zero.rule.update(torch.zeros(6, dtype=torch.float64), Rz.detach(), mask))


def test_inbatch_mass_is_the_share_of_wrong_class_mass_on_batch_labels():
    g = torch.Generator().manual_seed(5)
    head = MinMinCE(4, 9, g, init_std=1.0)
    head.setup({"n_train": 6, "batch_size": 3})
    h, y = torch.randn(6, 4, generator=g), torch.tensor([1, 4, 4, 0, 2, 8])
    p = torch.softmax((h @ head.W.T).double().detach(), 1)
    ref = []
    for s in (0, 3):
        for i in range(s, s + 3):
            others = set(y[s:s + 3].tolist()) - {y[i].item()}
            ref.append(sum(p[i, j].item() for j in others) / (1 - p[i, y[i]].item()))
    assert head.epoch_metrics(h, y)["inbatch_mass"] == pytest.approx(sum(ref) / 6, rel=1e-9)


def test_sgd_dual_and_bsgd_formulas():
    R, mask = _R(3)
    nu = torch.zeros(R.shape[0], dtype=torch.float64)
    mean = torch.stack([torch.exp(R[i][mask[i]]).mean() for i in range(len(nu))])
    assert torch.allclose(DUALS.get("sgd_dual")(lr=0.2, schedule="constant").update(nu, R, mask), nu - 0.2 * (1 - mean))
    lse = torch.stack([torch.logsumexp(R[i][mask[i]], 0) for i in range(len(nu))])
    assert torch.allclose(DUALS.get("bsgd")().loss(R, mask, nu), lse)


def test_shifted_logits_use_the_batch_multiset():
    head = MinMinCE(3, 10, torch.Generator().manual_seed(0))
    h = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([2, 5, 2, 9])  # label 2 twice: R between examples 0 and 2 is exactly 0
    R, mask = head.shifted_logits(h, y)
    o = h @ head.W.T
    for i in range(4):
        for j in range(4):
            assert R[i, j].item() == pytest.approx((o[i, y[j]] - o[i, y[i]]).item(), abs=1e-6)
    assert R[0, 2].item() == 0.0 and mask.sum().item() == 12 and not mask.diagonal().any()


def test_updates_touch_only_batch_rows():
    K, d = 50, 6
    head = MinMinCE(d, K, torch.Generator().manual_seed(0), dual="scent", dual_params={"alpha": 10.0})
    head.setup({"n_train": 20})
    opt = RowSGD(head.parameters(), lr=0.5, beta=0.9)
    g = torch.Generator().manual_seed(1)
    touched = set()
    for step in range(3):
        y = torch.randint(0, K, (8,), generator=g)
        touched |= set(y.tolist())
        W0 = head.W.detach().clone()
        loss = head.loss(torch.randn(8, d, generator=g), y, torch.arange(8) + step, None)
        opt.zero_grad()
        loss.backward()
        assert head.W.grad.is_sparse  # no dense (K, d) gradient is ever formed
        opt.step()
        changed = (head.W.detach() != W0).any(1).nonzero().flatten().tolist()
        assert set(changed) <= set(y.tolist()) and changed
        V = opt.state[head.W]["V"]
        untouched = sorted(set(range(K)) - touched)
        assert (V[untouched] == 0).all() and (V[sorted(touched)] != 0).any(1).all()


def test_row_sgd_matches_dense_sgd_without_momentum():
    torch.manual_seed(0)
    W = torch.nn.Parameter(torch.randn(10, 3))
    W2 = torch.nn.Parameter(W.detach().clone())
    ids = torch.tensor([1, 4, 4, 7])
    (torch.nn.functional.embedding(ids, W, sparse=True) ** 2).sum().backward()
    (W2[ids] ** 2).sum().backward()
    RowSGD([W], lr=0.1).step()
    torch.optim.SGD([W2], lr=0.1).step()
    assert torch.allclose(W, W2)


def test_nu_is_checkpointed_and_resumed(tiny_xmc, tmp_path):
    from conftest import TINY_EXP, train_run

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    exp = {**TINY_EXP, "task": {"name": "multiclass", "params": {"eval_train_size": 100}},
           "methods": normalise_methods({"scent": {"head": "minmin_ce", "params": {"dual": "scent",
                                                                                    "dual_params": {"alpha": 5.0}}}}),
           "model": {"encoder": {"name": "identity"}},
           "train": {"epochs": 3, "batch_size": 32, "lr": 0.5, "optimizer": "row_sgd", "schedule": "cosine"}}
    processed, feats, entry = tiny_xmc
    task = make_task(exp, entry, processed, feats, torch.device("cpu"), 0)
    full = train_run(exp, task, "d", "scent", 0, tmp_path / "full", torch.device("cpu"))
    with pytest.raises(KeyboardInterrupt):
        train_run(exp, task, "d", "scent", 0, tmp_path / "cut", torch.device("cpu"), interrupt_after=1)
    ck = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert ck["model"]["head.nu"].shape == (task.stats["n_train"],) and ck["model"]["head.nu"].abs().sum() > 0
    resumed = train_run(exp, task, "d", "scent", 0, tmp_path / "cut", torch.device("cpu"))
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]
    assert full["curves"]["epoch"][0] == 0  # curves start before the first update
    assert full["initial"]["val_ce"] == pytest.approx(math.log(task.n_classes), abs=0.05)


def test_inbatch_mass_over_row_chunks_equals_one_pass():
    """Batches larger than the 64-row chunks give the brute-force share (duplicate labels counted once)."""
    g = torch.Generator().manual_seed(6)
    head = MinMinCE(5, 40, g, init_std=1.0)
    head.setup({"n_train": 300, "batch_size": 150})
    h, y = torch.randn(300, 5, generator=g), torch.randint(0, 40, (300,), generator=g)
    p = torch.softmax((h @ head.W.T).double().detach(), 1)                                      # (300, 40)
    ref = []
    for s in (0, 150):
        inb = torch.zeros(40, dtype=torch.bool)
        inb[y[s:s + 150]] = True
        for i in range(s, s + 150):
            m = inb.clone()
            m[y[i]] = False
            ref.append((p[i] * m).sum() / (1 - p[i, y[i]]))
    assert head.epoch_metrics(h, y)["inbatch_mass"] == pytest.approx(torch.stack(ref).mean().item(), rel=1e-9)
