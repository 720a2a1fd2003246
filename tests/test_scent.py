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
    params = {"scent": {"alpha": 1e5}, "sox": {"gamma": 0.1}, "sgd_dual": {"lr": 0.5}, "bsgd": {}}[rule]
    R, mask = _R(scale=1.0)
    R = R + r_val
    nu = torch.full((R.shape[0],), nu_val, dtype=torch.float64)
    r = DUALS.get(rule)(**params)
    new = r.update(nu, R, mask)
    assert torch.isfinite(new).all()
    assert torch.isfinite(r.loss(R, mask, new)).all()


def test_sox_differs_from_scent_only_in_step():
    R, mask = _R(2)
    nu = torch.linspace(-2, 2, R.shape[0], dtype=torch.float64)
    gamma = 0.3
    sox = SOX(gamma).update(nu, R, mask)
    for i in range(R.shape[0]):  # SCENT with alpha_i = gamma e^-nu_i, one example at a time
        one = SCENT(gamma * math.exp(-nu[i].item())).update(nu[i:i + 1], R[i:i + 1], mask[i:i + 1])
        assert sox[i].item() == pytest.approx(one.item(), abs=1e-12)
    assert torch.allclose(sox, scent_step(nu, logmeanexp(R, mask), math.log(gamma) - nu))
    # SOX is the moving average e^nu' = (e^nu + gamma m) / (1 + gamma)
    m = torch.exp(logmeanexp(R, mask))
    assert torch.allclose(torch.exp(sox), (torch.exp(nu) + gamma * m) / (1 + gamma))


def test_sgd_dual_and_bsgd_formulas():
    R, mask = _R(3)
    nu = torch.zeros(R.shape[0], dtype=torch.float64)
    mean = torch.stack([torch.exp(R[i][mask[i]]).mean() for i in range(len(nu))])
    assert torch.allclose(DUALS.get("sgd_dual")(lr=0.2).update(nu, R, mask), nu - 0.2 * (1 - mean))
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
    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task
    from xcbench.train import run

    from conftest import TINY_EXP

    exp = {**TINY_EXP, "task": {"name": "multiclass", "params": {"eval_train_size": 100}},
           "methods": normalise_methods({"scent": {"head": "minmin_ce", "params": {"dual": "scent",
                                                                                    "dual_params": {"alpha": 5.0}}}}),
           "model": {"encoder": {"name": "identity"}},
           "train": {"epochs": 3, "batch_size": 32, "lr": 0.5, "optimizer": "row_sgd", "schedule": "cosine"}}
    processed, feats, entry = tiny_xmc
    task = make_task(exp, entry, processed, feats, torch.device("cpu"), 0)
    full = run(exp, task, "d", "scent", 0, tmp_path / "full", torch.device("cpu"))
    with pytest.raises(KeyboardInterrupt):
        run(exp, task, "d", "scent", 0, tmp_path / "cut", torch.device("cpu"), interrupt_after=1)
    ck = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert ck["model"]["head.nu"].shape == (task.stats["n_train"],) and ck["model"]["head.nu"].abs().sum() > 0
    resumed = run(exp, task, "d", "scent", 0, tmp_path / "cut", torch.device("cpu"))
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]
    assert full["curves"]["epoch"][0] == 0  # curves start before the first update
    assert full["initial"]["val_ce"] == pytest.approx(math.log(task.n_classes), abs=0.05)
