"""Synthetic generators: deterministic from the seed, readable by the same readers as real data."""

import hashlib

import numpy as np
import pytest

from xcbench.data.datasets import load_npz, prepare
from xcbench.data.synthetic import generate

TINY = ["synthetic-xmc-tiny", "synthetic-faces-tiny", "synthetic-lm-tiny", "synthetic-seq-tiny"]


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("name", TINY)
def test_generators_are_deterministic_and_prepare(tmp_path, catalogue, name):
    entry = catalogue[name]
    generate(entry, tmp_path / "a")
    generate(entry, tmp_path / "b")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    meta = prepare(entry, tmp_path / "a", tmp_path / "p.npz")
    arrays, meta2 = load_npz(tmp_path / "p.npz")
    assert meta2["task"] == entry["task"] and meta == meta2
    assert arrays


def test_synthetic_xmc_power_law_and_learnable(tmp_path, catalogue):
    entry = catalogue["synthetic-xmc-tiny"]
    generate(entry, tmp_path)
    prepare(entry, tmp_path, tmp_path / "p.npz")
    arrays, meta = load_npz(tmp_path / "p.npz")
    counts = np.sort(np.bincount(arrays["train_Y"].indices, minlength=meta["n_labels"]))[::-1]
    assert counts[0] > 5 * max(1, counts[len(counts) // 2])  # heavy head, long tail
    assert arrays["train_Y"].shape == (800, 60) and arrays["test_X"].shape == (200, 300)


def test_softmax_inverse_cdf_draws_the_softmax():
    """On a grid of N uniforms each word is drawn for a share of them within 1/N of softmax(S)_w (brute force:
    the probabilities from the scores directly), on every row with its own scores."""
    from xcbench.data.synthetic import softmax_inverse_cdf

    rng = np.random.default_rng(0)
    S = rng.standard_normal((3, 7)) * 3 + np.array([[0.0], [50.0], [-80.0]])  # (3, 7), rows far from 0
    N = 4000
    u = np.tile((np.arange(N) + 0.5) / N, (3, 1))                            # (3, N)
    w = softmax_inverse_cdf(S, u)
    p = np.exp(S) / np.exp(S).sum(1, keepdims=True)
    for i in range(3):
        share = np.bincount(w[i], minlength=7) / N
        assert np.abs(share - p[i]).max() <= 1.0 / N + 1e-12


def test_synthetic_xmc_words_do_not_move_with_a_cpus_rounding():
    """Another CPU's BLAS or exp rounds the float64 scores differently in the last bits (~1e-16 relative): no
    word of a tiny set's 40,000 draws moves under a change 10^4 times larger, while a change of 1e-5 (a float32
    sum's rounding over thousands of words, as in the float32 generator) moves some, so the comparison sees a
    move: the words, and so the raw files, are the same on every CPU."""
    from xcbench.data.faces import counter_uniform
    from xcbench.data.synthetic import softmax_inverse_cdf

    rng = np.random.default_rng(1)
    S = 2.0 * rng.standard_normal((1000, 300)) + np.log(np.arange(1, 301) ** -1.0)  # (1000, 300) like the tiny set
    u = counter_uniform(7, np.arange(1000), 40)                                     # (1000, 40)
    w = softmax_inverse_cdf(S, u)
    jitter = rng.standard_normal(S.shape)
    assert (softmax_inverse_cdf(S * (1 + 1e-12 * jitter), u) == w).all()
    assert (softmax_inverse_cdf(S * (1 + 1e-5 * jitter), u) != w).any()


def test_synthetic_xmc_tiny_has_its_recorded_bits(tmp_path, catalogue):
    """The raw files of synthetic-xmc-tiny as written on an AMD EPYC (AVX2) on 2026-12-02; a CPU that writes
    other bits fails here (the float32 generator, synthetic-xmc-f32, did between CPUs)."""
    generate(catalogue["synthetic-xmc-tiny"], tmp_path)
    assert _digest(tmp_path)["train.txt"] == "1d5dd0e55f1236dc480e9e1c30f9dbef8d106c4700f2e8beed84bc1d9faf23f0"
    assert _digest(tmp_path)["test.txt"] == "23a8ce21dbddf2da17abcdfb4d93df8f0a61dc5189a3a4019033cc2a5d0b7335"


def test_faces_verification_identities_disjoint(tmp_path, catalogue):
    entry = catalogue["synthetic-faces-tiny"]
    generate(entry, tmp_path)
    with np.load(tmp_path / "faces.npz") as z:
        assert z["train_x"].shape == (50 * 20, 32) and z["verif_y"].max() == 19
        # same-identity samples are closer than different-identity ones on average
        x, y = z["train_x"], z["train_y"]
        xn = x / np.linalg.norm(x, axis=1, keepdims=True)
        S = xn @ xn.T
        same = y[:, None] == y[None, :]
        assert S[same].mean() > S[~same].mean() + 0.1
        # verification identities are new: a verification sample is closer to the mean of the other
        # samples of its own identity than to the mean of any training identity
        unit = lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True)  # noqa: E731
        train_means = unit(np.stack([x[y == c].mean(0) for c in np.unique(y)]))
        xv, yv = z["verif_x"], z["verif_y"]
        gaps = []
        for i in range(len(yv)):
            others = (yv == yv[i]) & (np.arange(len(yv)) != i)
            own = unit(xv[others].mean(0)) @ unit(xv[i])
            gaps.append(own - (train_means @ unit(xv[i])).max())
        assert np.median(gaps) > 0.05


def test_lazy_faces_equal_eager_ones(tmp_path, catalogue):
    """Rows generated per batch from the stored model equal the eagerly generated arrays, in any order,
    and the multiclass task serves the same batches and evaluation rows from either."""
    import torch

    from xcbench.data.faces import FaceModel, LazyRows, counter_normal
    from xcbench.tasks.base import make_task

    entry = catalogue["synthetic-faces-tiny"]
    lazy_entry = {**entry, "name": "lazy", "params": {**entry["params"], "lazy": True}}
    generate(entry, tmp_path / "eager")
    generate(lazy_entry, tmp_path / "lazy")
    assert (tmp_path / "lazy" / "faces.npz").stat().st_size < 2000   # the model, not the rows
    m_e = prepare(entry, tmp_path / "eager", tmp_path / "e.npz")
    m_l = prepare(lazy_entry, tmp_path / "lazy", tmp_path / "l.npz")
    assert {k: m_e[k] for k in ("n_classes", "dim", "n_train", "n_val", "n_test")} == \
           {k: m_l[k] for k in ("n_classes", "dim", "n_train", "n_val", "n_test")}
    with np.load(tmp_path / "eager" / "faces.npz") as z:
        x_train, y_train = z["train_x"], z["train_y"]
    model = FaceModel(**entry["params"])
    rows = LazyRows(model, "train")
    k = np.array([999, 3, 500, 3, 0])
    assert torch.equal(rows[torch.from_numpy(k)], torch.from_numpy(x_train[k]))
    assert torch.equal(rows[10:20], torch.from_numpy(x_train[10:20]))
    assert np.array_equal(model.labels("train"), y_train)
    # counter-based normals: a row's values do not depend on which other rows are drawn with it
    a = counter_normal(7, np.arange(100), 8)
    assert np.array_equal(a[[42, 5]], counter_normal(7, np.array([42, 5]), 8))
    assert abs(a.mean()) < 0.1 and abs(a.std() - 1) < 0.1
    exp = {"task": {"name": "multiclass", "params": {"eval_train_size": 100, "eval_val_size": 60}}}
    te = make_task(exp, entry, str(tmp_path / "e.npz"), None, torch.device("cpu"), 0)
    tl = make_task(exp, lazy_entry, str(tmp_path / "l.npz"), None, torch.device("cpu"), 0)
    be = next(iter(te.train_batches(16, torch.Generator().manual_seed(0))))
    bl = next(iter(tl.train_batches(16, torch.Generator().manual_seed(0))))
    assert all(torch.allclose(u, v) for u, v in zip(be, bl))
    for s in ("train", "val", "test"):
        assert all(torch.allclose(u, v) for u, v in zip(te.eval_xy[s], tl.eval_xy[s]))
    assert len(te.eval_xy["val"][1]) == 60 and len(te.eval_xy["train"][1]) == 100
