"""Metrics against hand-computed cases and a brute-force numpy reference."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xcbench import metrics as M


def test_hand_computed_precision_ndcg_recall():
    # row 0: labels {1, 4}; predictions 4, 0, 1 -> hits 1, 0, 1
    # row 1: labels {2};    predictions 3, 2, 0 -> hits 0, 1, 0
    topk = torch.tensor([[4, 0, 1], [3, 2, 0]])
    y = torch.tensor([[1, 4], [2, -1]])
    assert M.precision_at_k(topk, y, 1) == pytest.approx(0.5)
    assert M.precision_at_k(topk, y, 3) == pytest.approx((2 / 3 + 1 / 3) / 2)
    d = [1 / math.log2(j + 2) for j in range(3)]
    ndcg0 = (d[0] + d[2]) / (d[0] + d[1])
    ndcg1 = d[1] / d[0]
    assert M.ndcg_at_k(topk, y, 3) == pytest.approx((ndcg0 + ndcg1) / 2)
    assert M.recall_at_k(topk, y, 3) == pytest.approx(1.0)
    assert M.recall_at_k(topk, y, 1) == pytest.approx(0.25)


def test_single_label_and_empty_rows():
    topk = torch.tensor([[2, 1], [0, 1], [1, 0]])
    y = torch.tensor([2, 1, 0])
    assert M.precision_at_k(topk, y, 1) == pytest.approx(1 / 3)
    empty = torch.tensor([[-1, -1], [3, -1]])
    assert M.precision_at_k(torch.tensor([[0], [3]]), empty, 1) == pytest.approx(0.5)
    assert M.ndcg_at_k(torch.tensor([[0], [3]]), empty, 1) == pytest.approx(0.5)


def _reference(scores: np.ndarray, Y: np.ndarray, inv: np.ndarray, k: int):
    """Brute force on dense arrays: per-row loops, no shared code with xcbench.metrics."""
    p = n = r = 0.0
    psp_num = psp_den = 0.0
    for s, yrow in zip(scores, Y):
        order = np.argsort(-s, kind="stable")[:k]
        rel = yrow[order]
        p += rel.sum() / k
        dcg = sum(rel[j] / np.log2(j + 2) for j in range(k))
        ideal = sum(1 / np.log2(j + 2) for j in range(min(k, int(yrow.sum()))))
        n += dcg / ideal if ideal > 0 else 0.0
        r += rel.sum() / yrow.sum() if yrow.sum() > 0 else 0.0
        psp_num += (rel * inv[order]).sum()
        psp_den += np.sort(inv[yrow > 0])[::-1][:k].sum()
    B = len(Y)
    return p / B, n / B, r / B, psp_num / psp_den


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_against_brute_force(seed, k):
    rng = np.random.default_rng(seed)
    B, C = 200, 40
    Y = (rng.random((B, C)) < rng.uniform(0.02, 0.2, size=(B, 1))).astype(np.int64)
    Y[:3] = 0  # rows without labels
    scores = rng.standard_normal((B, C))
    counts = Y.sum(0)
    inv = M.jain_inverse_propensity(torch.from_numpy(counts), B, 0.55, 1.5)
    lmax = max(1, Y.sum(1).max())
    pad = torch.full((B, lmax), -1)
    for i in range(B):
        idx = np.flatnonzero(Y[i])
        pad[i, : len(idx)] = torch.from_numpy(idx)
    topk = torch.from_numpy(scores).topk(k, 1).indices
    p, n, r, psp = _reference(scores, Y, inv.numpy(), k)
    assert M.precision_at_k(topk, pad, k) == pytest.approx(p, abs=1e-12)
    assert M.ndcg_at_k(topk, pad, k) == pytest.approx(n, abs=1e-12)
    assert M.recall_at_k(topk, pad, k) == pytest.approx(r, abs=1e-12)
    assert M.psp_at_k(topk, pad, inv, k) == pytest.approx(psp, abs=1e-12)


def test_jain_propensity_formula():
    counts = torch.tensor([0, 1, 10, 1000])
    N, A, B = 5000, 0.55, 1.5
    C = (math.log(N) - 1) * (B + 1) ** A
    want = [1 + C * (c + B) ** -A for c in [0, 1, 10, 1000]]
    assert M.jain_inverse_propensity(counts, N, A, B).tolist() == pytest.approx(want)


def test_tpr_at_fpr_hand_case():
    scores = torch.tensor([0.9, 0.8, 0.3, 0.7, 0.6, 0.5, 0.4, 0.2, 0.1, 0.05, 0.0, -0.1])
    same = torch.tensor([True, True, True] + [False] * 9)
    # 9 negatives; fpr 1/9 allows one negative above t -> t = 0.6 (second-highest negative);
    # positives above 0.6: 0.9, 0.8 -> TPR 2/3
    assert M.tpr_at_fpr(scores, same, 1 / 9) == pytest.approx(2 / 3)
    assert M.tpr_at_fpr(scores, same, 0.0) == pytest.approx(2 / 3)  # t = 0.7
    assert M.tpr_at_fpr(scores, same, 1.0) == pytest.approx(1.0)


def test_topk_hit_rate():
    scores = torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.1, 0.7]])
    gallery = torch.tensor([10, 11, 12])
    q = torch.tensor([12, 12])
    assert M.topk_hit_rate(scores, q, gallery, 1) == pytest.approx(0.0)
    assert M.topk_hit_rate(scores, q, gallery, 2) == pytest.approx(1.0)


def test_chunked_cross_entropy_matches_full():
    g = torch.Generator().manual_seed(0)
    h, W, b = torch.randn(7, 5, generator=g), torch.randn(103, 5, generator=g), torch.randn(103, generator=g)
    y = torch.randint(0, 103, (7,), generator=g)
    want = F.cross_entropy(h @ W.T + b, y, reduction="none")
    assert torch.allclose(M.cross_entropy_full(h, W, y, b, chunk=10), want, atol=1e-5)
    assert torch.allclose(M.cross_entropy_full(h, W, y, None, chunk=1000), F.cross_entropy(h @ W.T, y, reduction="none"),
                          atol=1e-5)


def test_perplexity():
    assert M.perplexity(10 * math.log(50.0), 10) == pytest.approx(50.0)


def test_softmax_loss_hand_case_and_empty_rows():
    # row 0: logits (0, ln 2, 0), labels {1, 2}: Z = 4, losses ln 4 - ln 2 = ln 2 and ln 4, mean 1.5 ln 2
    # row 1: logits (ln 3, 0, 0), label {0}: Z = 5, loss ln 5 - ln 3; row 2 has no label and is left out
    o = torch.tensor([[0.0, math.log(2), 0.0], [math.log(3), 0.0, 0.0], [9.0, 0.0, 0.0]])
    y = torch.tensor([[1, 2], [0, -1], [-1, -1]])
    total, rows = M.softmax_loss_rows(o, y)
    assert rows == 2
    assert total == pytest.approx(1.5 * math.log(2) + math.log(5 / 3), rel=1e-6)
    single, n = M.softmax_loss_rows(o[1:2], torch.tensor([0]))
    assert n == 1 and single == pytest.approx(math.log(5 / 3), rel=1e-6)


def test_xmc_softmax_loss_is_the_test_mean_over_batches(tiny_xmc):
    """The task's `softmax_loss` over batches of 7 rows equals one brute-force pass over the whole split,
    each row's positives weighted 1 / |y_i| (F.cross_entropy on a uniform target over them)."""
    from conftest import TINY_EXP

    from xcbench.model import build_model
    from xcbench.tasks.base import make_task

    processed, feats, entry = tiny_xmc
    task = make_task(TINY_EXP, entry, processed, feats, torch.device("cpu"), 0)
    model = build_model(TINY_EXP["model"], "full_softmax", {"init_std": 1.0}, task.in_dim, task.n_classes, 0).eval()
    with torch.no_grad():
        got = task.evaluate(model, "test", batch_size=7)["softmax_loss"]
        o = model.scores(task.x["test"]).double()                                   # (N, C)
        Y = task.y["test"]
        target = torch.zeros_like(o)
        for i, row in enumerate(Y):
            pos = row[row >= 0]
            target[i, pos] = 1.0 / max(len(pos), 1)
        keep = (Y >= 0).any(1)
        want = F.cross_entropy(o[keep], target[keep], reduction="none").mean().item()
    assert got == pytest.approx(want, rel=1e-5)
