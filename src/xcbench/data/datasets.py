"""`prepare`: raw files -> one `dataset.npz` per dataset, and loaders of prepared data.

The processed file holds plain arrays only (no pickle): sparse matrices as `<key>.data/.indices/
.indptr/.shape`, and a JSON `meta` string (task, sizes, the split seed). One preparer is
registered per raw `format` of config/datasets.yaml.

Multi-label targets are CSR (indptr, indices) on disk and a padded (B, Lmax) LongTensor with -1
in batches (`pad_labels`); single-label targets are a LongTensor (B,). Metrics and heads share
this convention.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch

from xcbench.data import logs, readers
from xcbench.data.faces import FaceModel
from xcbench.data.fetch import layout_of
from xcbench.io import atomic_path
from xcbench.registry import READERS
from xcbench.seed import numpy_generator


def save_npz(path: str | Path, arrays: dict, meta: dict) -> None:
    flat = {"meta": np.array(json.dumps(meta, sort_keys=True))}
    for k, v in arrays.items():
        if sp.issparse(v):
            v = v.tocsr()
            flat.update({f"{k}.data": v.data, f"{k}.indices": v.indices, f"{k}.indptr": v.indptr,
                         f"{k}.shape": np.asarray(v.shape)})
        else:
            flat[k] = np.asarray(v)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **flat)


def load_npz(path: str | Path) -> tuple[dict, dict]:
    with np.load(path, allow_pickle=False) as z:
        files = dict(z.items())
    meta = json.loads(str(files.pop("meta")))
    out = {}
    for k in sorted({k.rsplit(".", 1)[0] for k in files if k.endswith(".indptr")}):
        out[k] = sp.csr_matrix((files.pop(f"{k}.data"), files.pop(f"{k}.indices"), files.pop(f"{k}.indptr")),
                               shape=tuple(files.pop(f"{k}.shape")))
    out.update(files)
    return out, meta


def split_rows(n: int, frac: float, seed: int, purpose: str) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random split of range(n): (kept, held_out) index arrays, both sorted."""
    perm = numpy_generator(seed, purpose).permutation(n)
    k = int(round(n * frac))
    return np.sort(perm[k:]), np.sort(perm[:k])


def pad_labels(Y: sp.csr_matrix, rows: np.ndarray | None = None) -> torch.Tensor:
    """CSR label rows -> (B, Lmax) LongTensor padded with -1."""
    Y = Y if rows is None else Y[rows]
    counts = np.diff(Y.indptr)
    out = np.full((Y.shape[0], max(1, int(counts.max(initial=0)))), -1, np.int64)
    out[np.repeat(np.arange(Y.shape[0]), counts), np.arange(Y.nnz) - np.repeat(Y.indptr[:-1], counts)] = Y.indices
    return torch.from_numpy(out)


def prepare(entry: dict, raw_dir: str | Path, out_path: str | Path) -> dict:
    """Read the layout that fetch put in raw_dir (the entry's own or an alternative) into one .npz."""
    raw_dir = Path(raw_dir)
    lay = layout_of(entry, raw_dir)
    arrays, meta = READERS.get(lay["format"])(lay, raw_dir)
    meta = {"dataset": entry["name"], "task": entry["task"], "format": entry["format"], **meta}
    save_npz(out_path, arrays, meta)
    return meta


def _xmc_parts(entry: dict, read) -> tuple[dict, dict]:
    """Train and test (X, Y) of an XMC layout: its own train/test files, one file split at a fixed row
    (`split.train_rows`, a published split stored as one file), or one file split at random (80/20)."""
    files = entry["splits"]
    if "all" not in files:
        return {s: read(files[s]) for s in ("train", "test")}, {}
    X, Y = read(files["all"])
    split = entry.get("split", {"test_frac": 0.2, "seed": 0})
    if "train_rows" in split:
        tr, te = np.arange(split["train_rows"]), np.arange(split["train_rows"], X.shape[0])
    else:
        tr, te = split_rows(X.shape[0], split["test_frac"], split["seed"], f"{entry['name']}/test-split")
    return {"train": (X[tr], Y[tr]), "test": (X[te], Y[te])}, {"test_split": split}


def _xmc_arrays(parts: dict, extra: dict) -> tuple[dict, dict]:
    arrays = {f"{s}_{k}": m for s, (X, Y) in parts.items() for k, m in (("X", X), ("Y", Y))}
    meta = {"n_labels": parts["train"][1].shape[1], "n_features": parts["train"][0].shape[1],
            **{f"n_{s}": X.shape[0] for s, (X, _) in parts.items()}, **extra}
    return arrays, meta


@READERS.register("xc_bow")
def _prepare_xc_bow(entry: dict, raw: Path) -> tuple[dict, dict]:
    return _xmc_arrays(*_xmc_parts(entry, lambda f: readers.read_xc_bow(raw / f)))


@READERS.register("libsvm_multilabel")
def _prepare_libsvm_multilabel(entry: dict, raw: Path) -> tuple[dict, dict]:
    read = lambda f: readers.read_libsvm_multilabel(raw / f, entry["n_features"], entry["n_classes"],  # noqa: E731
                                                    label_base=entry.get("label_base", 0))
    return _xmc_arrays(*_xmc_parts(entry, read))


@READERS.register("lm_text")
def _prepare_lm(entry: dict, raw: Path) -> tuple[dict, dict]:
    ids, vocab = readers.read_lm_text({s: raw / f for s, f in entry["splits"].items()})
    return ({f"{s}_tokens": v for s, v in ids.items()},
            {"n_classes": len(vocab), "vocab": vocab, **{f"n_{s}": len(v) for s, v in ids.items()}})


def _sequences(seqs: list[np.ndarray]) -> tuple[dict, dict]:
    lengths = np.asarray([len(s) for s in seqs], np.int64)
    items = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
    return ({"seq_items": items, "seq_indptr": np.concatenate([[0], np.cumsum(lengths)])},
            {"n_users": len(seqs), "n_classes": int(items.max(initial=-1)) + 1, "n_interactions": int(items.size)})


@READERS.register("interactions")
def _prepare_interactions(entry: dict, raw: Path) -> tuple[dict, dict]:
    f, layout = entry.get("filters", {}), entry.get("log", {})
    seqs = logs.log_sequences(raw / entry["splits"]["all"], f.get("min_rating"), f.get("k_core", 10),
                              f.get("max_len"), **layout)
    arrays, meta = _sequences(seqs)
    return arrays, {**meta, "filters": f, "time_ordered": True}


@READERS.register("seq_lines")
def _prepare_seq_lines(entry: dict, raw: Path) -> tuple[dict, dict]:
    lines = readers.read_user_item_lines(raw / entry["splits"]["all"])
    base = int(entry.get("item_id_base", 1))
    arrays, meta = _sequences([lines[u] - base for u in sorted(lines)])
    return arrays, {**meta, "time_ordered": True}


@READERS.register("user_item_split")
def _prepare_user_item_split(entry: dict, raw: Path) -> tuple[dict, dict]:
    arrays, meta = {}, {"time_ordered": False}
    for s in ("train", "test"):
        lines = readers.read_user_item_lines(raw / entry["splits"][s])
        a, m = _sequences([lines.get(u, np.zeros(0, np.int64)) for u in range(max(lines) + 1)])
        arrays.update({f"{s}_{k}": v for k, v in a.items()})
        meta[f"n_{s}_interactions"] = m["n_interactions"]
        meta["n_classes"] = max(meta.get("n_classes", 0), m["n_classes"])
        meta["n_users"] = max(meta.get("n_users", 0), m["n_users"])
    return arrays, meta


@READERS.register("implicit_mat")
def _prepare_implicit_mat(entry: dict, raw: Path) -> tuple[dict, dict]:
    mat = scipy.io.loadmat(raw / entry["splits"]["all"])
    key = next(k for k, v in mat.items() if sp.issparse(v))
    R = sp.csr_matrix(mat[key])
    return {"interactions": R}, {"n_users": R.shape[0], "n_classes": R.shape[1], "n_interactions": int(R.nnz),
                                 "time_ordered": False}


@READERS.register("dense_npz")
def _prepare_dense(entry: dict, raw: Path) -> tuple[dict, dict]:
    with np.load(raw / entry["splits"]["all"], allow_pickle=False) as z:
        arrays = dict(z.items())
    if "lazy_spec" in arrays:  # rows generated on demand (data/faces.py): sizes from the model
        model = FaceModel(**json.loads(str(arrays["lazy_spec"])))
        return arrays, {"n_classes": model.n_ids, "dim": model.dim, "lazy": True,
                        **{f"n_{s}": model.size(s) for s in model.per_id}}
    return arrays, {"n_classes": int(arrays["train_y"].max()) + 1, "dim": int(arrays["train_x"].shape[1]),
                    **{f"n_{k[:-2]}": int(len(v)) for k, v in arrays.items() if k.endswith("_y")}}
