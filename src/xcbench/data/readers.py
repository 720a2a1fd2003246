"""Readers of the raw formats the five papers' datasets come in.

- Extreme Classification Repository bag-of-words text (`read_xc_bow`): a header line
  `n_samples n_features n_labels`, then one line per sample `l1,l2,... f:v f:v ...` with 0-based
  ids; a line may carry no labels (it starts with a space or directly with `f:v`). Returns scipy
  CSR matrices X (n, d) float32 and Y (n, L) with ones.
- LIBSVM multi-label text (`read_libsvm_multilabel`, the LIBSVM data page's copies of the Mulan
  sets): the XC format without its header and with 1-based feature indices, `l1,l2 f:v f:v ...`;
  sizes come from the catalogue. `.bz2` files are read compressed.
- Word-level LM text (`read_lm_text`, PTB and WikiText-2): whitespace tokens, `<eos>` appended to
  every line, vocabulary built from the training split in order of first appearance.
- Interaction logs (ratings, check-ins) are read by `xcbench.data.logs`.
- User/item line files (`read_user_item_lines`): `user item item ...` per line (LightGCN/KGAT
  splits and S3-Rec sequences) or one `user item` pair per line in time order (SASRec's files); the
  lines of a user are joined in file order.
Malformed input raises `FormatError` naming the file and the 1-based line number.
"""

from __future__ import annotations

import bz2
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from xcbench.data.xc_text import parse_fast


class FormatError(ValueError):
    """Malformed raw data; the message names file and line."""


def _fail(path: Path, lineno: int, what: str, fix: str = "") -> FormatError:
    return FormatError(f"{path}:{lineno}: {what}" + (f" ({fix})" if fix else ""))


def read_xc_bow(path: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """X (n, d) float32 and Y (n, L) CSR from an XC BOW file. The whole file is parsed by a few numpy
    conversions (`xc_text.parse_fast`); when that fails or the data break a rule, the line-by-line reader
    (`_parse_lines`) runs to name the file, line and fix. Feature values must be finite."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        X, Y, rows = parse_fast(raw)
    except (ValueError, IndexError):
        X = None
    if X is None or not _valid(X, Y):
        X, Y, rows = _parse_lines(path, raw.decode("utf-8"))
    bad = np.flatnonzero(~np.isfinite(X.data))
    if len(bad):
        r = int(np.searchsorted(X.indptr, bad[0], side="right") - 1)
        raise _fail(path, int(rows[r]), f"feature value {X.data[bad[0]]} is not finite",
                    "nan or inf in a BOW file: regenerate or clean it")
    X.sum_duplicates()
    return X, Y


def _header(path: Path, line: str) -> tuple[int, int, int]:
    header = line.split()
    if len(header) != 3 or not all(h.isdigit() for h in header):
        raise _fail(path, 1, f"expected header 'n_samples n_features n_labels', got {' '.join(header)!r}",
                    "is this an Extreme Classification Repository BOW file?")
    return tuple(map(int, header))


def _valid(X: sp.csr_matrix, Y: sp.csr_matrix) -> bool:
    return (X.indices.min(initial=0) >= 0 and X.indices.max(initial=-1) < X.shape[1]
            and Y.indices.min(initial=0) >= 0 and Y.indices.max(initial=-1) < Y.shape[1])


def _parse_lines(path: Path, text: str) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray]:
    """Line by line, raising FormatError with file:line at the first malformed token."""
    lines = text.split("\n")
    cut = not text.endswith("\n")  # the last line has no newline: a download cut mid-line
    n, d, L = _header(path, lines[0])
    last = len(lines) if cut else len(lines) - 1

    def fail(lineno: int, what: str, fix: str = "") -> FormatError:
        if cut and lineno == last:
            fix = "the file looks truncated: its last line has no newline; download it again"
        return _fail(path, lineno, what, fix)

    x_ptr, x_idx, x_val, y_ptr, y_idx, rows = [0], [], [], [0], [], []
    lineno = 1
    for lineno, line in enumerate(lines[1:last], start=2):
        if not line.strip():
            continue
        toks = line.split()
        lab = "" if (line[0].isspace() or ":" in toks[0]) else toks[0]
        feats = toks[1:] if lab else toks
        if lab:
            try:
                ls = [int(t) for t in lab.split(",") if t != ""]
            except ValueError:
                raise fail(lineno, f"bad label list {lab!r}", "labels are comma-separated integers") from None
            if any(not 0 <= l < L for l in ls):
                raise fail(lineno, f"label id out of range [0, {L})")
            y_idx.extend(sorted(set(ls)))
        for t in feats:
            k, sep, v = t.partition(":")
            try:
                fi, fv = int(k), float(v)
            except ValueError:
                raise fail(lineno, f"bad feature {t!r}", "features are written 'index:value'") from None
            if not sep or not 0 <= fi < d:
                raise fail(lineno, f"bad feature {t!r}", f"index must be in [0, {d})")
            x_idx.append(fi)
            x_val.append(fv)
        x_ptr.append(len(x_idx))
        y_ptr.append(len(y_idx))
        rows.append(lineno)
    if len(rows) != n:
        raise _fail(path, lineno if rows else 1, f"header says {n} samples but the file has {len(rows)}",
                    "the file looks truncated" if len(rows) < n else "the header's sample count is wrong")
    X = sp.csr_matrix((np.asarray(x_val, np.float32), np.asarray(x_idx, np.int64), np.asarray(x_ptr, np.int64)),
                      shape=(n, d))
    Y = sp.csr_matrix((np.ones(len(y_idx), np.float32), np.asarray(y_idx, np.int64), np.asarray(y_ptr, np.int64)),
                      shape=(n, L))
    return X, Y, np.asarray(rows)


def read_libsvm_multilabel(path: str | Path, n_features: int, n_labels: int, feature_base: int = 1,
                           label_base: int = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """X (n, n_features) float32 and Y (n, n_labels) CSR from a LIBSVM multi-label file: per line an
    optional comma-separated label list, then `index:value` pairs, indices counted from feature_base
    and labels from label_base. The same rows as the XC file they were converted from (header dropped,
    indices + 1) give the same matrices as `read_xc_bow`."""
    path = Path(path)
    raw = bz2.decompress(path.read_bytes()) if path.suffix == ".bz2" else path.read_bytes()
    x_ptr, x_idx, x_val, y_ptr, y_idx = [0], [], [], [0], []
    for lineno, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        toks = line.split()
        if not toks:
            continue
        lab = "" if (line[0].isspace() or ":" in toks[0]) else toks[0]
        if lab:
            try:
                ls = sorted({int(t) - label_base for t in lab.split(",") if t != ""})
            except ValueError:
                raise _fail(path, lineno, f"bad label list {lab!r}", "labels are comma-separated integers") from None
            if ls and not (0 <= ls[0] and ls[-1] < n_labels):
                raise _fail(path, lineno, f"label id out of range [{label_base}, {n_labels + label_base})",
                            "set label_base (the first label's id) or n_classes in config/datasets.yaml")
            y_idx.extend(ls)
        for t in toks[1:] if lab else toks:
            k, sep, v = t.partition(":")
            try:
                fi, fv = int(k) - feature_base, float(v)
            except ValueError:
                raise _fail(path, lineno, f"bad feature {t!r}", "features are written 'index:value'") from None
            if not sep or not 0 <= fi < n_features:
                raise _fail(path, lineno, f"bad feature {t!r}",
                            f"index must be in [{feature_base}, {n_features + feature_base}): n_features in the catalogue")
            x_idx.append(fi)
            x_val.append(fv)
        x_ptr.append(len(x_idx))
        y_ptr.append(len(y_idx))
    n = len(x_ptr) - 1
    X = sp.csr_matrix((np.asarray(x_val, np.float32), np.asarray(x_idx, np.int64), np.asarray(x_ptr, np.int64)),
                      shape=(n, n_features))
    Y = sp.csr_matrix((np.ones(len(y_idx), np.float32), np.asarray(y_idx, np.int64), np.asarray(y_ptr, np.int64)),
                      shape=(n, n_labels))
    if not np.isfinite(X.data).all():
        raise _fail(path, 1, "a feature value is not finite", "nan or inf in a LIBSVM file: regenerate or clean it")
    X.sum_duplicates()
    return X, Y


def read_lm_text(paths: dict[str, str | Path]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Token ids per split and the vocabulary (train order of first appearance, `<eos>` included)."""
    vocab: dict[str, int] = {}
    out = {}
    for split in ("train", *[s for s in paths if s != "train"]):
        path = Path(paths[split])
        ids = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                for w in line.split() + ["<eos>"]:
                    if w not in vocab:
                        if split != "train":
                            raise _fail(path, lineno, f"word {w!r} is not in the training vocabulary",
                                        "LM splits must share the training vocabulary (use <unk>)")
                        vocab[w] = len(vocab)
                    ids.append(vocab[w])
        out[split] = np.asarray(ids, np.int64)
    return out, list(vocab)


def read_user_item_lines(path: str | Path) -> dict[int, np.ndarray]:
    path = Path(path)
    out = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            toks = line.split()
            if not toks:
                continue
            try:
                ids = [int(t) for t in toks]
            except ValueError:
                raise _fail(path, lineno, f"non-integer id in {line.strip()[:60]!r}", "expected 'user item item ...'") from None
            out.setdefault(ids[0], []).extend(ids[1:])  # a user on several lines (SASRec's "user item" pairs): in order
    return {u: np.asarray(v, np.int64) for u, v in out.items()}
