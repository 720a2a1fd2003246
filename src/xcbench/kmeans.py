"""Lloyd's k-means in torch, shared by the MIDX codebooks (samplers/midx.py) and the k-means
selector (selectors/simple.py): one implementation, deterministic given the initial centroids (the
callers draw them from an explicit generator), on CPU or GPU alike.

    assign:  a_i = argmin_k ||x_i - c_k||^2 = argmax_k (2 x_i . c_k - ||c_k||^2)
    update:  c_k = mean of {x_i : a_i = k}   (an empty cluster keeps its centroid)
"""

from __future__ import annotations

import torch


def nearest(X: torch.Tensor, C: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    """Index of the nearest centroid (rows of C) of every row of X: (n,)."""
    c2 = C.square().sum(1)
    return torch.cat([(2 * X[s:s + chunk] @ C.T - c2).argmax(1) for s in range(0, len(X), chunk)])


def kmeans(X: torch.Tensor, C: torch.Tensor, max_iter: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means from centroids C (K, d) on X (n, d): (centroids, assignments (n,)). Stops when
    no assignment changes; an empty cluster keeps its centroid."""
    a_prev = None
    for _ in range(max_iter):
        a = nearest(X, C)                                                                     # (n,)
        if a_prev is not None and torch.equal(a, a_prev):
            break
        sums = torch.zeros_like(C).index_add_(0, a, X)                                        # (K, d)
        cnt = torch.bincount(a, minlength=len(C)).to(X.dtype)                                 # (K,)
        C = torch.where(cnt.unsqueeze(1) > 0, sums / cnt.clamp(min=1).unsqueeze(1), C)
        a_prev = a
    return C, a
