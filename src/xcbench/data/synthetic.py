"""Deterministic synthetic datasets: tiny-scale test data and stand-ins for unobtainable data.

Each generator writes raw files in the same format as the real data it stands in for, so the
readers, `prepare` and feature extraction are exercised exactly as on real data.

- `synthetic-xmc`: multi-label bag-of-words in the XC repository format. Label priors follow a
  power law p_l ~ rank^-a; each label has a latent unit vector z_l; a document with labels S has
  latent u = sum_{l in S} z_l + sigma eps and draws its words from softmax(E u + b) (E word
  embeddings, b Zipfian word log-frequencies), so labels are learnable from the words. The words are drawn
  by inverse CDF in float64 with counter-based uniforms, so every CPU writes the same files
  (`synthetic-xmc-f32`, the float32 torch draws before 2026-12-02, stays for the set kept runs used).
- `synthetic-faces`: identities mu_c on the unit sphere in R^r, a fixed random two-layer tanh
  observation map f: R^r -> R^d, samples x = f(normalise(mu_c + sigma eps)); identities for
  verification are disjoint from the training identities (docs/design.md, Data). Every row is a
  pure function of (seed, split, index) (data/faces.py); `lazy: true` stores only the model, and
  batches generate their rows (the 360K-identity set).
- `synthetic-lm`: a Zipfian bigram source: with prob lam the next word is drawn from the unigram
  Zipf law, else from the previous word's own sparse successor distribution.
- `synthetic-seq`: latent user/item model: next item ~ softmax((u + v_prev) . v_i / T + b_i).
- `synthetic-vectors`: n vectors around `n_clusters` centres. kind `images`: 16x16 non-negative
  smooth images (a prototype per cluster = the positive part of a Gaussian-smoothed random field;
  a sample = the positive part of its prototype plus smoothed noise), the USPS stand-in of the
  RF-softmax kernel table (pairwise cosines spread over ~0.2-0.95 as for digit images); kind
  `sphere`: centres on the unit sphere in R^dim plus Gaussian noise (class embeddings for timings).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from xcbench.data.faces import FaceModel, counter_uniform
from xcbench.io import atomic_path
from xcbench.registry import GENERATORS
from xcbench.seed import derive_seed, numpy_generator, torch_generator


def _zipf(n: int, a: float) -> np.ndarray:
    p = np.arange(1, n + 1, dtype=np.float64) ** -a
    return p / p.sum()


def _write_lines(path: Path, lines) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def softmax_inverse_cdf(S: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Draws from softmax(S_i) by inverse CDF: w_it = the first w with C_iw > u_it C_iV, C_i = cumsum exp(S_i -
    max S_i).  S (c, V) scores, u (c, t) uniforms in (0, 1) -> (c, t) int64"""
    C = np.cumsum(np.exp(S - S.max(1, keepdims=True)), 1)                   # (c, V)
    u = u * C[:, -1:]                                                        # (c, t)
    return np.minimum(np.stack([np.searchsorted(Ci, ui, side="right") for Ci, ui in zip(C, u)]), S.shape[1] - 1)


def _xmc_docs(out: Path, seed: int, n_train: int, n_test: int, n_labels: int, n_features: int, latent_dim: int,
              label_zipf: float, avg_labels: float, noise: float, words) -> list[str]:
    """The shared model of the synthetic-xmc generators: label sets and latents u, drawn with one numpy stream in
    chunks of 4,096 documents; `words(split, s, U, E, b)` draws the words of the chunk's documents (rows s, ...)."""
    rng = numpy_generator(seed, "synthetic-xmc")
    prior = _zipf(n_labels, label_zipf)[rng.permutation(n_labels)]
    cdf = np.cumsum(prior)
    Z = rng.standard_normal((n_labels, latent_dim))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)                          # (L, r)
    E = rng.standard_normal((n_features, latent_dim))                       # (V, r)
    b = np.log(_zipf(n_features, 1.0)[rng.permutation(n_features)])        # (V,)
    files = []
    for split, n in (("train", n_train), ("test", n_test)):
        k = np.minimum(1 + rng.poisson(avg_labels - 1, size=n), n_labels)
        lines = []
        for s in tqdm(range(0, n, 4096), desc=f"synthetic-xmc {split}", disable=None):
            e = min(n, s + 4096)
            kmax = int(k[s:e].max())
            draws = np.searchsorted(cdf, rng.random((e - s, kmax)) * cdf[-1])  # (c, kmax)
            draws = np.minimum(draws, n_labels - 1)
            labs = [np.unique(draws[i, : k[s + i]]) for i in range(e - s)]
            U = np.stack([Z[l].sum(0) for l in labs]) + noise * rng.standard_normal((e - s, latent_dim))  # (c, r)
            for i, w in enumerate(words(split, s, U, E, b)):
                ids, cnt = np.unique(w, return_counts=True)
                lines.append(",".join(map(str, labs[i])) + " " + " ".join(f"{a}:{c}" for a, c in zip(ids, cnt)))
        _write_lines(out / f"{split}.txt", [f"{n} {n_features} {n_labels}", *lines])
        files.append(f"{split}.txt")
    return files


@GENERATORS.register("synthetic-xmc")
def synthetic_xmc(out: Path, seed: int, n_train: int, n_test: int, n_labels: int, n_features: int,
                  latent_dim: int = 32, label_zipf: float = 1.0, avg_labels: float = 3.0,
                  doc_len: int = 60, noise: float = 0.3, word_scale: float = 2.0) -> list[str]:
    """Power-law multi-label bag-of-words (the module's model), words drawn in float64: the same files on every CPU.

    Doc i's word t is the first w with C_iw > u_it C_iV, C_i = cumsum_w exp(s_iw - max s_i), s_i = word_scale u_i
    E^T / sqrt(r) + b, u_it = counter_uniform(split key, i, t). A CPU's
    rounding of s (its BLAS, its exp) moves C by ~1e-16 relative, which changes a draw only when u lands that close
    to a boundary (~1e-7 chance over the 10K set's 1.9M draws): the raw files are the same on every CPU."""
    key = {split: derive_seed(seed, f"synthetic-xmc/words/{split}") for split in ("train", "test")}

    def words(split, s, U, E, b):
        for a in range(0, len(U), 512):                                     # 512 rows: (512, V) float64 at a time
            S = word_scale * (U[a:a + 512] @ E.T) / np.sqrt(latent_dim) + b  # (c, V)
            yield from softmax_inverse_cdf(S, counter_uniform(key[split], np.arange(s + a, s + a + len(S)), doc_len))

    return _xmc_docs(out, seed, n_train, n_test, n_labels, n_features, latent_dim, label_zipf, avg_labels, noise,
                     words)


@GENERATORS.register("synthetic-xmc-f32")
def synthetic_xmc_f32(out: Path, seed: int, n_train: int, n_test: int, n_labels: int, n_features: int,
                      latent_dim: int = 32, label_zipf: float = 1.0, avg_labels: float = 3.0,
                      doc_len: int = 60, noise: float = 0.3, word_scale: float = 2.0) -> list[str]:
    """synthetic-xmc with float32 torch.multinomial word draws (until 2026-12-02), for synthetic-xmc-100k's kept runs.

    Its bits depend on the CPU's float32 matmul and exp (an AMD EPYC and the CPU that built the kept
    quick runs disagree), so it is kept only for the sets whose kept runs were trained on it (synthetic-xmc-100k)."""
    g = torch_generator(seed, "synthetic-xmc/words")

    def words(split, s, U, E, b):
        logits = word_scale * torch.from_numpy(U).float() @ torch.from_numpy(E).float().T / np.sqrt(latent_dim) \
            + torch.from_numpy(b).float()                                   # (c, V)
        return torch.multinomial(torch.softmax(logits, 1), doc_len, replacement=True, generator=g).numpy()

    return _xmc_docs(out, seed, n_train, n_test, n_labels, n_features, latent_dim, label_zipf, avg_labels, noise,
                     words)


@GENERATORS.register("synthetic-faces")
def synthetic_faces(out: Path, seed: int, n_ids: int, dim: int, per_id: dict, n_verif_ids: int,
                    per_verif_id: int = 4, latent_dim: int = 64, hidden: int = 256, sigma: float = 0.35,
                    lazy: bool = False) -> list[str]:
    params = dict(seed=seed, n_ids=n_ids, dim=dim, per_id=per_id, n_verif_ids=n_verif_ids, per_verif_id=per_verif_id,
                  latent_dim=latent_dim, hidden=hidden, sigma=sigma)
    model = FaceModel(**params)
    if lazy:  # rows are generated when a batch asks for them (data/faces.py): store the model only
        arrays = {"lazy_spec": np.array(json.dumps(params, sort_keys=True))}
    else:
        arrays = {}
        for split in (*per_id, "verif"):
            arrays[f"{split}_x"], arrays[f"{split}_y"] = model.split_arrays(split)
    with atomic_path(out / "faces.npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
    return ["faces.npz"]


@GENERATORS.register("synthetic-lm")
def synthetic_lm(out: Path, seed: int, vocab: int, tokens: dict, zipf: float = 1.1, successors: int = 20,
                 lam: float = 0.3, line_len: int = 25) -> list[str]:
    rng = numpy_generator(seed, "synthetic-lm")
    uni_cdf = np.cumsum(_zipf(vocab, zipf))
    succ = np.minimum(np.searchsorted(uni_cdf, rng.random((vocab, successors))), vocab - 1)  # (V, s)
    succ_cdf = np.cumsum(rng.dirichlet(np.full(successors, 0.3), size=vocab), axis=1)        # (V, s)
    seqs = {}
    for split, n in tokens.items():  # {"train": .., "valid": .., "test": ..}
        u, coin = rng.random(n), rng.random(n)
        uni = np.minimum(np.searchsorted(uni_cdf, rng.random(n)), vocab - 1)
        seq = np.empty(n, np.int64)
        prev = 0
        for t in range(n):
            if coin[t] < lam:
                prev = uni[t]
            else:
                j = min(int(np.searchsorted(succ_cdf[prev], u[t])), successors - 1)
                prev = succ[prev, j]
            seq[t] = prev
        seqs[split] = seq
    # as in PTB: words seen fewer than twice in train become <unk> everywhere (and <unk> occurs in train)
    counts = np.bincount(seqs["train"], minlength=vocab)
    words = np.array([f"w{w}" if counts[w] >= 2 else "<unk>" for w in range(vocab)], dtype=object)
    files = []
    for split, seq in seqs.items():
        toks = words[seq]
        if split == "train" and "<unk>" not in set(toks):
            toks[-1] = "<unk>"
        _write_lines(out / f"{split}.txt", (" ".join(toks[s:s + line_len]) for s in range(0, len(toks), line_len)))
        files.append(f"{split}.txt")
    return files


@GENERATORS.register("synthetic-seq")
def synthetic_seq(out: Path, seed: int, n_users: int, n_items: int, seq_len: int = 20, dim: int = 16,
                  temperature: float = 0.5) -> list[str]:
    g = torch_generator(seed, "synthetic-seq")
    U = torch.randn(n_users, dim, generator=g) / dim ** 0.5
    V = torch.randn(n_items, dim, generator=g) / dim ** 0.5
    b = torch.from_numpy(np.log(_zipf(n_items, 0.8))).float()
    cur = torch.multinomial(torch.softmax(b, 0), n_users, replacement=True, generator=g)  # (n_users,)
    seqs = [cur]
    for _ in range(seq_len - 1):
        logits = ((U + V[cur]) @ V.T) / temperature + b                                   # (n_users, n_items)
        cur = torch.multinomial(torch.softmax(logits, 1), 1, generator=g).squeeze(1)
        seqs.append(cur)
    S = torch.stack(seqs, 1).numpy()
    _write_lines(out / "sequences.txt", (" ".join(map(str, [u + 1, *(S[u] + 1)])) for u in range(n_users)))
    return ["sequences.txt"]


def generate(entry: dict, raw_dir: str | Path) -> list[str]:
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    return GENERATORS.get(entry["generator"])(raw_dir, **entry.get("params", {}))


@GENERATORS.register("synthetic-vectors")
def synthetic_vectors(out: Path, seed: int, n: int, dim: int = 256, n_clusters: int = 10, kind: str = "images",
                      noise: float = 0.6) -> list[str]:
    from scipy.ndimage import gaussian_filter

    rng = numpy_generator(seed, f"synthetic-vectors/{kind}")
    y = rng.integers(0, n_clusters, n)
    if kind == "images":
        side = int(round(dim ** 0.5))
        if side * side != dim:
            raise ValueError(f"synthetic-vectors: kind images needs a square dim, got {dim}")
        field = lambda k: np.stack([gaussian_filter(rng.standard_normal((side, side)), 1.5) for _ in range(k)])  # noqa: E731
        protos = np.maximum(field(n_clusters), 0) * 4.0                                     # (K, side, side)
        x = np.maximum(protos[y] + noise * field(n) * 4.0, 0).reshape(n, dim)
    else:
        mu = rng.standard_normal((n_clusters, dim))
        mu /= np.linalg.norm(mu, axis=1, keepdims=True)
        x = mu[y] + noise / np.sqrt(dim) * rng.standard_normal((n, dim))
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    with atomic_path(out / "vectors.npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, train_x=x.astype(np.float32), train_y=y.astype(np.int64))
    return ["vectors.npz"]
