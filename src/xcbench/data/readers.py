"""Readers of the raw formats the five papers' datasets come in.

- Extreme Classification Repository bag-of-words text (`read_xc_bow`): a header line
  `n_samples n_features n_labels`, then one line per sample `l1,l2,... f:v f:v ...` with 0-based
  ids; a line may carry no labels (it starts with a space or directly with `f:v`). Returns scipy
  CSR matrices X (n, d) float32 and Y (n, L) with ones.
- Word-level LM text (`read_lm_text`, PTB and WikiText-2): whitespace tokens, `<eos>` appended to
  every line, vocabulary built from the training split in order of first appearance.
- Interaction logs (ratings, check-ins) are read by `xcbench.data.logs`.
- User/item line files (`read_user_item_lines`): `user item item ...` per line (LightGCN/KGAT
  splits and S3-Rec sequences) or one `user item` pair per line in time order (SASRec's files); the
  lines of a user are joined in file order.
Malformed input raises `FormatError` naming the file and the 1-based line number.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp


class FormatError(ValueError):
    """Malformed raw data; the message names file and line."""


def _fail(path: Path, lineno: int, what: str, fix: str = "") -> FormatError:
    return FormatError(f"{path}:{lineno}: {what}" + (f" ({fix})" if fix else ""))


def read_xc_bow(path: str | Path) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """X (n, d) float32 and Y (n, L) CSR from an XC BOW file. The whole file is parsed by a few numpy
    conversions (`_parse_fast`); when that fails or the data break a rule, the line-by-line reader
    (`_parse_lines`) runs to name the file, line and fix. Feature values must be finite."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        X, Y, rows = _parse_fast(text)
    except (ValueError, IndexError):
        X = None
    if X is None or not _valid(X, Y):
        X, Y, rows = _parse_lines(path, text)
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


def _numbers(text: str, sep: str, count: int) -> np.ndarray | None:
    """`count` float64 numbers parsed by numpy's C reader, or None when the text is not exactly that."""
    if count == 0:
        return np.zeros(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warns (and stops early) on a malformed number
        try:
            out = np.fromstring(text, dtype=np.float64, sep=sep)
        except (ValueError, DeprecationWarning):
            return None
    return out if len(out) == count else None


def _parse_fast(text: str) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray] | tuple[None, None, None]:
    """The happy path: labels and 'f:v' pairs of all rows joined into two strings, each converted by
    numpy's C parser at once; per row only a split and two counts run in Python. Anything unexpected
    returns None and the line reader takes over (and names the line)."""
    lines = text.split("\n")
    header = lines[0].split()
    if len(header) != 3 or not all(h.isdigit() for h in header):
        return None, None, None
    n, d, L = map(int, header)
    rows = [i for i in range(1, len(lines)) if lines[i].strip()]
    if len(rows) != n or not text.endswith("\n"):
        return None, None, None
    labs, feats = [], []
    n_lab, n_feat = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for r, i in enumerate(rows):
        line = lines[i]
        first, _, rest = line.strip().partition(" ")
        if line[0].isspace() or ":" in first:
            first, rest = "", line
        if first:
            if ",," in first or first[0] == "," or first[-1] == ",":
                return None, None, None
            labs.append(first)
            n_lab[r] = first.count(",") + 1
        if len(rest.split()) != rest.count(":"):  # a token that is not one 'f:v' pair
            return None, None, None
        feats.append(rest)
        n_feat[r] = rest.count(":")
    y_idx = _numbers(",".join(labs), ",", int(n_lab.sum()))
    kv = _numbers(" ".join(feats).replace(":", " "), " ", 2 * int(n_feat.sum()))
    if y_idx is None or kv is None or not (np.all(y_idx == np.round(y_idx)) and np.all(kv[0::2] == np.round(kv[0::2]))):
        return None, None, None
    ptr = lambda c: np.concatenate([[0], np.cumsum(c)])  # noqa: E731
    X = sp.csr_matrix((kv[1::2].astype(np.float32), kv[0::2].astype(np.int64), ptr(n_feat)), shape=(n, d))
    Y = sp.csr_matrix((np.ones(len(y_idx), np.float32), y_idx.astype(np.int64), ptr(n_lab)), shape=(n, L))
    Y.sum_duplicates()  # a label listed twice in a row counts once (sorted, as the line reader does)
    Y.data[:] = 1.0
    return X, Y, np.asarray(rows) + 1


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
