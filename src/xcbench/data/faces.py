"""Synthetic face-identity features, computable row by row (the Glint360K / MS-Celeb stand-in).

Identity c has a centre mu_c = normalise(g_c) on the unit sphere in R^r; sample k of split s has
identity c = k // per_id[s] and observation
    x_sk = tanh(2 z A1) A2,   z = normalise(mu_c + sigma / sqrt(r) * e_sk),   A1 (r, hidden), A2 (hidden, d)
with fixed random A1, A2. Every random number is a pure function of (seed, stream, row, column):
a counter-based generator (splitmix64 of the counter, two uniforms -> one Box-Muller normal), so
any rows can be generated alone, in any order, with the same values as generating them all. The
360,232-identity set (3.6M x 512 floats, 7 GB) is thus never held: `LazyRows` produces a batch's
rows when it is indexed. Verification identities (for the face-identification tasks) use their own
centre stream, so they are disjoint from the training identities. The open-set validation identities
(`n_open_val_ids`, split "open_val") continue that stream after the verification ones (identities
n_verif_ids, n_verif_ids + 1, ...) with their own noise: unseen in training and disjoint from the test's.
"""

from __future__ import annotations

import numpy as np
import torch

from xcbench.seed import derive_seed, numpy_generator

_GOLDEN, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrap-around arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def counter_normal(key: int, rows: np.ndarray, width: int) -> np.ndarray:
    """Standard normals N[r, j] = f(key, r, j) for the given rows.  (len(rows), width) float64"""
    c = rows.astype(np.uint64)[:, None] * np.uint64(width) + np.arange(width, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        base = _mix(c * np.uint64(2) + _mix(np.uint64(key)))
        u1 = ((_mix(base) >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53   # (0, 1)
        u2 = (_mix(base ^ _M1) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def counter_uniform(key: int, rows: np.ndarray, width: int) -> np.ndarray:
    """Uniforms U[r, j] = f(key, r, j) in (0, 1), 53 random bits each, for the given rows: integer arithmetic and
    one exact scaling, so every CPU gives the same bits.  (len(rows), width) float64"""
    c = rows.astype(np.uint64)[:, None] * np.uint64(width) + np.arange(width, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        return ((_mix(_mix(c + _mix(np.uint64(key)))) >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53


class FaceModel:
    """The generative model of one synthetic-faces dataset (the generator's params)."""

    def __init__(self, seed: int, n_ids: int, dim: int, per_id: dict, n_verif_ids: int, per_verif_id: int = 4,
                 latent_dim: int = 64, hidden: int = 256, sigma: float = 0.35, lazy: bool = False,
                 n_open_val_ids: int = 0) -> None:
        self.seed, self.n_ids, self.dim, self.r, self.sigma = seed, n_ids, dim, latent_dim, sigma
        self.per_id = {**per_id, "verif": per_verif_id, "open_val": per_verif_id}
        self.n_of = {s: n_ids for s in per_id} | {"verif": n_verif_ids, "open_val": n_open_val_ids}
        rng = numpy_generator(seed, "synthetic-faces/observation")
        self.A1 = rng.standard_normal((latent_dim, hidden)) / np.sqrt(latent_dim)                 # (r, hidden)
        self.A2 = rng.standard_normal((hidden, dim)) / np.sqrt(hidden)                            # (hidden, d)

    def size(self, split: str) -> int:
        return self.n_of[split] * self.per_id[split]

    def labels(self, split: str) -> np.ndarray:
        return np.repeat(np.arange(self.n_of[split], dtype=np.int64), self.per_id[split])

    def centres(self, ids: np.ndarray, verif: bool = False) -> np.ndarray:
        g = counter_normal(derive_seed(self.seed, "faces/centres" + ("/verif" if verif else "")), ids, self.r)
        return g / np.linalg.norm(g, axis=1, keepdims=True)                                      # (n, r)

    def rows(self, split: str, k: np.ndarray) -> np.ndarray:
        """Features of samples k (indices within the split).  (len(k), d) float32"""
        k = np.asarray(k, dtype=np.int64)
        ident = k // self.per_id[split] + (self.n_of["verif"] if split == "open_val" else 0)
        mu = self.centres(ident, verif=split in ("verif", "open_val"))                           # (n, r)
        e = counter_normal(derive_seed(self.seed, f"faces/noise/{split}"), k, self.r)
        z = mu + self.sigma / np.sqrt(self.r) * e
        z /= np.linalg.norm(z, axis=1, keepdims=True)
        return (np.tanh(z @ self.A1 * 2.0) @ self.A2).astype(np.float32)

    def split_arrays(self, split: str, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
        """All rows of a split at once (the eager path)."""
        n = self.size(split)
        x = np.concatenate([self.rows(split, np.arange(s, min(n, s + chunk))) for s in range(0, n, chunk)]) \
            if n else np.zeros((0, self.dim), np.float32)
        return x, self.labels(split)


class LazyRows:
    """A (n, d) float tensor whose rows are generated when indexed: `rows[idx]`, `rows[a:b]`, `len`."""

    def __init__(self, model: FaceModel, split: str, scale: float = 1.0) -> None:
        self.model, self.split, self.scale = model, split, scale
        self.shape = (model.size(split), model.dim)

    def __len__(self) -> int:
        return self.shape[0]

    def __mul__(self, factor) -> "LazyRows":
        return LazyRows(self.model, self.split, self.scale * float(factor))

    def __getitem__(self, idx) -> torch.Tensor:
        if isinstance(idx, slice):
            k = np.arange(*idx.indices(len(self)))
        else:
            k = idx.cpu().numpy() if torch.is_tensor(idx) else np.asarray(idx)
        x = torch.from_numpy(self.model.rows(self.split, k.reshape(-1)))
        return x * self.scale if self.scale != 1.0 else x
