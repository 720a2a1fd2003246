"""Interaction logs -> per-user time-ordered item sequences (MIDX paper section 6.3, Table 6).

The paper builds its sequences from raw logs: keep ratings > 3 (MovieLens-10M, Amazon-books; a
check-in log has no rating and keeps every row), drop users and items with fewer than 10
interactions, order each user's records by timestamp. Here, in that order:

    kept      = {r : rating(r) > min_rating}
    repeat      drop r whose user or item has < k_core kept records, until none is dropped
    seq(u)    = items of u's kept records sorted by (time, line in the file); the last max_len
                of them when max_len is set (none: the whole history; the model reads windows)

Item ids are remapped to 0..n-1 in natural order of the raw ids, users are listed in natural order.
A record repeated in the log (a place checked into twice) stays: the paper does not say it
removes repeats, and the evaluation keeps a repeated target rankable.

Layouts (`log:` of a config/datasets.yaml entry; `.gz` files are read compressed):
- RecBole atomic `.inter` (no `columns`): a tab-separated header naming user_id, item_id, rating,
  timestamp (`name:type` fields).
- Headerless delimited text: `sep` and `columns`, one name per field from user_id, item_id,
  rating, timestamp, or `-` to skip the field; `time: unix` (seconds) or `iso` (ISO 8601, a
  trailing Z allowed). MovieLens-10M `ratings.dat` is `::`-separated user, item, rating, time;
  Amazon's `ratings_<Category>.csv` is `,`-separated user, item, rating, time; SNAP's Gowalla
  check-ins are tab-separated user, ISO time, latitude, longitude, location.
Malformed lines raise `FormatError` naming the file, the 1-based line and the expected layout.
"""

from __future__ import annotations

import gzip
from array import array
from datetime import datetime
from pathlib import Path

import numpy as np

from xcbench.data.readers import _fail

FIELDS = ("user_id", "item_id", "rating", "timestamp")


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _time_parser(kind: str):
    if kind == "unix":
        return float
    if kind == "iso":
        return lambda s: datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith("Z") else s).timestamp()
    raise ValueError(f"log.time must be 'unix' or 'iso', got {kind!r}")


def read_log(path: str | Path, sep: str = "\t", columns: list[str] | None = None, time: str = "unix"):
    """(users, items, ratings or None, times, user names, item names): one entry per record, ids as codes."""
    path = Path(path)
    to_time = _time_parser(time)
    u_code: dict[str, int] = {}
    i_code: dict[str, int] = {}
    u, i, r, t = array("q"), array("q"), array("d"), array("d")
    with _open(path) as f:
        first = 1
        if columns is None:  # RecBole: the header names the columns
            header = f.readline().rstrip("\n").split("\t")
            names = [h.split(":")[0] for h in header]
            if any(c not in names for c in FIELDS):
                raise _fail(path, 1, f"header {header} lacks one of {FIELDS}",
                            "expected a RecBole atomic .inter file, or give log.sep and log.columns")
            columns, sep, first = names, "\t", 2
        unknown = [c for c in columns if c not in FIELDS and c != "-"]
        if unknown or "user_id" not in columns or "item_id" not in columns or "timestamp" not in columns:
            raise ValueError(f"{path}: log.columns {columns} must name user_id, item_id and timestamp "
                             f"(rating optional, '-' skips a field); unknown: {unknown}")
        pu, pi, pt = columns.index("user_id"), columns.index("item_id"), columns.index("timestamp")
        pr = columns.index("rating") if "rating" in columns else None
        layout = sep.join(columns).replace("\t", "<TAB>")
        for lineno, line in enumerate(f, start=first):
            parts = line.rstrip("\r\n").split(sep)
            if len(parts) == 1 and not parts[0]:
                continue
            try:
                if len(parts) < len(columns):
                    raise IndexError
                uid = u_code.setdefault(parts[pu], len(u_code))
                iid = i_code.setdefault(parts[pi], len(i_code))
                tv = to_time(parts[pt])
                rv = float(parts[pr]) if pr is not None else 0.0
            except (IndexError, ValueError):
                raise _fail(path, lineno, f"cannot read {line.strip()[:80]!r}", f"expected {layout}") from None
            u.append(uid)
            i.append(iid)
            t.append(tv)
            r.append(rv)
    as_np = lambda a, dt: np.frombuffer(a, dtype=dt).copy() if len(a) else np.zeros(0, dt)  # noqa: E731
    return (as_np(u, np.int64), as_np(i, np.int64), as_np(r, np.float64) if pr is not None else None,
            as_np(t, np.float64), list(u_code), list(i_code))


def k_core(u: np.ndarray, i: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of the records left when users and items with < k records are dropped repeatedly."""
    keep = np.ones(u.size, bool)
    while True:
        cu = np.bincount(u[keep], minlength=int(u.max(initial=-1)) + 1)
        ci = np.bincount(i[keep], minlength=int(i.max(initial=-1)) + 1)
        new = keep & (cu[u] >= k) & (ci[i] >= k)
        if new.sum() == keep.sum():
            return new
        keep = new


def _natural(s: str):
    return (0, int(s)) if s.isdigit() else (1, s)


def _natural_ranks(codes: np.ndarray, names: list[str]) -> np.ndarray:
    """code -> rank of its name, in natural order, among the codes present."""
    present = np.unique(codes)
    rank = np.full(len(names), -1, np.int64)
    rank[sorted(present.tolist(), key=lambda c: _natural(names[c]))] = np.arange(present.size)
    return rank


def log_sequences(path: str | Path, min_rating: float | None = None, k_core_min: int = 10,
                  max_len: int | None = None, **layout) -> list[np.ndarray]:
    """Time-ordered item sequences (ids 0..n-1), one per kept user, after the filters above."""
    u, i, r, t, users, items = read_log(path, **layout)
    keep = np.ones(u.size, bool) if (r is None or min_rating is None) else r > min_rating
    keep[keep] = k_core(u[keep], i[keep], k_core_min)
    rec = np.flatnonzero(keep)  # (n,) record numbers, in file order
    u, i, t = u[rec], i[rec], t[rec]
    u_rank, i_new = _natural_ranks(u, users), _natural_ranks(i, items)
    order = np.lexsort((rec, t, u_rank[u]))  # by user, then time, then line
    seq_items = i_new[i[order]]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(u_rank[u]))])
    out = [seq_items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return [s[-max_len:] if max_len else s for s in out]
