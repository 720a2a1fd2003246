"""Fixed features from bag-of-words data: tf-idf followed by a truncated SVD.

    idf_f = log((1 + n) / (1 + df_f)) + 1           (smoothed idf, fitted on the training split)
    x~    = normalise_2(x * idf)                     (row-wise L2 normalisation)
    h     = x~ V_k                                   (V_k: top-k right singular vectors of X~_train)

V_k is computed by a randomized range finder (Halko, Martinsson & Tropp 2011, Alg. 4.4 with q
power iterations) from a seeded numpy generator, and each singular vector's sign is fixed so
that its largest-magnitude entry is positive: the output is deterministic for a given seed.
This is the stand-in for the papers' pre-computed dense features (Slice fastText 512-d,
CascadeXML 768-d), which are not distributed.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from xcbench.registry import FEATURES
from xcbench.seed import numpy_generator


def tfidf(X: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    T = sp.csr_matrix(X.multiply(idf[None, :]), dtype=np.float64)
    norms = np.sqrt(np.asarray(T.multiply(T).sum(1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ T)


def top_right_singular_vectors(A: sp.csr_matrix, k: int, rng: np.random.Generator,
                               oversample: int = 10, n_iter: int = 4) -> np.ndarray:
    """(d, k) orthonormal V_k with A ~ U S V_k^T, sign-fixed."""
    n, d = A.shape
    if k + oversample >= min(n, d):
        _, _, Vt = np.linalg.svd(A.toarray(), full_matrices=False)
        V = Vt[:k].T
    else:
        Q = np.linalg.qr(A @ rng.standard_normal((d, k + oversample)))[0]   # (n, k+p)
        for _ in range(n_iter):
            Q = np.linalg.qr(A.T @ Q)[0]                                    # (d, k+p)
            Q = np.linalg.qr(A @ Q)[0]                                      # (n, k+p)
        B = (A.T @ Q).T                                                     # (k+p, d)
        _, _, Vt = np.linalg.svd(B, full_matrices=False)
        V = Vt[:k].T                                                        # (d, k)
    signs = np.sign(V[np.abs(V).argmax(0), np.arange(V.shape[1])])
    return V * np.where(signs == 0, 1, signs)


@FEATURES.register("tfidf_svd")
class TfidfSVD:
    """tf-idf + truncated SVD to `dim` dimensions (fewer if the data has fewer)."""

    def __init__(self, dim: int = 512, seed: int = 0) -> None:
        self.dim, self.seed = dim, seed

    def extract(self, arrays: dict, meta: dict) -> tuple[dict[str, torch.Tensor], dict]:
        Xtr = arrays["train_X"]
        n = Xtr.shape[0]
        df = np.bincount(Xtr.indices, minlength=Xtr.shape[1])
        idf = np.log((1 + n) / (1 + df)) + 1.0
        k = min(self.dim, *Xtr.shape)
        V = top_right_singular_vectors(tfidf(Xtr, idf), k, numpy_generator(self.seed, "tfidf_svd"))
        out = {s: torch.from_numpy(np.asarray(tfidf(arrays[f"{s}_X"], idf) @ V, np.float32))
               for s in ("train", "test")}
        return out, {"extractor": "tfidf_svd", "dim": k, "requested_dim": self.dim, "seed": self.seed}


@FEATURES.register("dense")
class Dense:
    """Pass-through of dense features already in the prepared data (synthetic-faces)."""

    def __init__(self, dim: int | None = None, seed: int = 0) -> None:
        self.dim = dim

    def extract(self, arrays: dict, meta: dict) -> tuple[dict[str, torch.Tensor], dict]:
        out = {k[:-2]: torch.from_numpy(np.asarray(v, np.float32)) for k, v in arrays.items() if k.endswith("_x")}
        return out, {"extractor": "dense", "dim": int(next(iter(out.values())).shape[1])}


@FEATURES.register("label_svd")
class LabelSVD:
    """Supervised fixed features ("cascade-like"): tf-idf rows projected on the top `dim` singular
    directions of the label-centroid matrix.

        C   = normalise_2(Y_train^T X~_train)           (L, v): each label's mean tf-idf vector
        V_k = top-k right singular vectors of C         (v, k)
        h   = x~ V_k

    Like the CascadeXML features (a transformer fine-tuned on the labels, 768-d), these features are
    fitted to the training labels, whereas `tfidf_svd` ("slice-like", unsupervised like Slice's
    fastText averages) is not. k = min(dim, L, v): data with fewer labels than `dim` get fewer
    dimensions (recorded in the feature meta)."""

    def __init__(self, dim: int = 768, seed: int = 0) -> None:
        self.dim, self.seed = dim, seed

    def extract(self, arrays: dict, meta: dict) -> tuple[dict[str, torch.Tensor], dict]:
        Xtr, Ytr = arrays["train_X"], sp.csr_matrix(arrays["train_Y"], dtype=np.float64)
        n = Xtr.shape[0]
        idf = np.log((1 + n) / (1 + np.bincount(Xtr.indices, minlength=Xtr.shape[1]))) + 1.0
        C = sp.csr_matrix(Ytr.T @ tfidf(Xtr, idf))                                          # (L, v)
        norms = np.sqrt(np.asarray(C.multiply(C).sum(1)).ravel())
        C = sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ C)
        k = min(self.dim, *C.shape)
        V = top_right_singular_vectors(C, k, numpy_generator(self.seed, "label_svd"))      # (v, k)
        out = {s: torch.from_numpy(np.asarray(tfidf(arrays[f"{s}_X"], idf) @ V, np.float32))
               for s in ("train", "test")}
        return out, {"extractor": "label_svd", "dim": k, "requested_dim": self.dim, "seed": self.seed}
