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


def test_label_svd_features_span_the_label_centroids():
    """label_svd: k = min(dim, L, v) orthonormal directions; every label centroid lies in their span
    when k = L (the features keep exactly the label-relevant directions of the tf-idf space)."""
    from xcbench.features.tfidf_svd import LabelSVD

    rng = np.random.default_rng(0)
    Y = sp.csr_matrix((rng.random((300, 6)) < 0.3).astype(np.float64))
    arrays = {"train_X": _data(0), "test_X": _data(1, n=50), "train_Y": Y}
    a, meta = LabelSVD(dim=768).extract(arrays, {})
    b, _ = LabelSVD(dim=768).extract(arrays, {})
    assert meta["dim"] == 6 and a["train"].shape == (300, 6) and a["test"].shape == (50, 6)
    assert torch.equal(a["train"], b["train"])
    X = _data(0)
    idf = np.log((1 + 300) / (1 + np.bincount(X.indices, minlength=80))) + 1.0
    T = tfidf(X, idf)
    C = (Y.T @ T).toarray()                                                     # (L, v) label sums
    # projecting the centroids on the feature directions loses nothing: ||C V|| = ||C|| per row
    V = np.linalg.lstsq(T.toarray(), a["train"].numpy().astype(np.float64), rcond=None)[0]  # (v, k)
    Q = np.linalg.qr(V)[0]
    assert np.allclose(np.linalg.norm(C @ Q, axis=1), np.linalg.norm(C, axis=1), rtol=1e-4)
