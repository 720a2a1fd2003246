"""tf-idf + truncated SVD: deterministic and equal to the exact SVD subspace."""

import numpy as np
import scipy.sparse as sp
import torch

from xcbench.features.tfidf_svd import TfidfSVD, tfidf, top_right_singular_vectors


def _data(seed=0, n=300, d=80):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    X.data = np.ceil(X.data * 5)
    return X


def test_randomized_svd_matches_exact():
    rng = np.random.default_rng(0)
    # a spectrum with a clear gap after 10 directions, so the top-10 subspace is well defined
    L = rng.standard_normal((300, 10)) @ np.diag(np.linspace(20, 10, 10)) @ rng.standard_normal((10, 80))
    A = sp.csr_matrix(L + 0.1 * rng.standard_normal((300, 80)))
    V = top_right_singular_vectors(A, 10, np.random.default_rng(0))
    _, s, Vt = np.linalg.svd(A.toarray(), full_matrices=False)
    # same subspace: projections of A onto both bases have equal norms per direction
    assert np.allclose(np.abs(V.T @ Vt[:10].T), np.eye(10), atol=1e-4)
    assert np.allclose(np.linalg.norm(A @ V, axis=0), s[:10], rtol=1e-6)


def test_tfidf_rows_unit_norm():
    A = tfidf(_data(), np.full(80, 2.0))
    norms = np.sqrt(np.asarray(A.multiply(A).sum(1)).ravel())
    assert np.allclose(norms[norms > 0], 1.0)


def test_extractor_deterministic_and_shaped():
    arrays = {"train_X": _data(0), "test_X": _data(1, n=50)}
    a, meta = TfidfSVD(dim=12, seed=3).extract(arrays, {})
    b, _ = TfidfSVD(dim=12, seed=3).extract(arrays, {})
    assert a["train"].shape == (300, 12) and a["test"].shape == (50, 12) and meta["dim"] == 12
    assert torch.equal(a["train"], b["train"]) and torch.equal(a["test"], b["test"])


def test_extractor_caps_dim_at_data_size():
    arrays = {"train_X": _data(0, n=40, d=20), "test_X": _data(1, n=5, d=20)}
    a, meta = TfidfSVD(dim=512).extract(arrays, {})
    assert a["train"].shape == (40, 20) and meta["dim"] == 20 and meta["requested_dim"] == 512
