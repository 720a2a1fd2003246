"""The Extreme Classification Repository's BOW text read by a few numpy conversions instead of a loop over lines
(readers.read_xc_bow's fast path; the line reader there names the line of any file this path declines).

A row `l1,l2 f:v f:v` is split by where its separators fall: its label count is the commas before its first space
plus one (none where the first token holds a ':'), its feature count its colons; every number of the body is then
read at once (`decimals`: digits as one integer N divided by 10^k, the correctly rounded value float() gives), and
the label / index / value positions follow from the counts.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp


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


def parse_fast(text: str | bytes) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray] | tuple[None, None, None]:
    """The happy path, with no per-row Python: every number of the body is read at once at the byte
    level (`decimals`; per row: its labels, then index, value pairs), and the rows' label and feature
    counts come from where the separators fall (commas before a row's first space, colons in the row).
    Whenever the counts and the numbers disagree, or a byte is unexpected (tab, CR, a blank row), it
    returns None and the line reader takes over and names the line."""
    raw = text.encode() if isinstance(text, str) else text
    h = raw.find(b"\n")
    header = raw[:h].split()
    if h < 0 or len(header) != 3 or not all(t.isdigit() for t in header) or not raw.endswith(b"\n"):
        return None, None, None
    n, d, L = map(int, header)
    body = raw[h + 1:]
    if b"\t" in body or b"\r" in body or b"\n\n" in body or body.startswith(b"\n"):
        return None, None, None
    B = np.frombuffer(body, np.uint8)
    nl = np.flatnonzero(B == ord("\n"))                                   # (n,) row ends
    if len(nl) != n:
        return None, None, None
    start = np.concatenate([[0], nl[:-1] + 1])                          # (n,) row starts
    row = lambda pos: np.searchsorted(nl, pos)  # noqa: E731             the row of each byte position
    per_row = lambda pos: np.bincount(row(pos), minlength=n)  # noqa: E731
    spaces = np.flatnonzero(B == ord(" "))
    k = np.searchsorted(spaces, start)
    first = np.minimum(spaces[np.minimum(k, len(spaces) - 1)] if len(spaces) else nl, nl)
    first = np.where(first < start, nl, first)                          # (n,) end of each row's first token
    colon, comma = np.flatnonzero(B == ord(":")), np.flatnonzero(B == ord(","))
    has_lab = (first > start) & (per_row(colon[colon < first[row(colon)]]) == 0)  # a first token without ':'
    in_first = comma < first[row(comma)]
    n_lab = np.where(has_lab, per_row(comma[in_first]) + 1, 0)
    n_feat = per_row(colon)
    sep = (B == ord(" ")) | (B == ord("\n"))
    word = np.flatnonzero(~sep & np.concatenate([[True], sep[:-1]]))    # first byte of every token
    if np.any(per_row(word) - has_lab != n_feat) or not in_first.all():
        return None, None, None                                        # a token that is not one 'f:v' pair
    count = int(n_lab.sum() + 2 * n_feat.sum())
    nums = decimals(B)
    if nums is None:  # signs, exponents, long mantissas: numpy's C parser reads those
        nums = _numbers(body.translate(_TO_SPACE).decode("ascii", "replace"), " ", count)
    if nums is None or len(nums) != count:
        return None, None, None
    size = n_lab + 2 * n_feat
    lab = np.ones(count, bool)                                          # labels: the first n_lab numbers of a row
    lab[np.repeat(np.cumsum(size) - size + n_lab, 2 * n_feat) + np.arange(2 * int(n_feat.sum()))
        - np.repeat(np.cumsum(2 * n_feat) - 2 * n_feat, 2 * n_feat)] = False
    y_idx, kv = nums[lab], nums[~lab]
    if not (np.all(y_idx == np.round(y_idx)) and np.all(kv[0::2] == np.round(kv[0::2]))):
        return None, None, None
    ptr = lambda c: np.concatenate([[0], np.cumsum(c)])  # noqa: E731
    X = sp.csr_matrix((kv[1::2].astype(np.float32), kv[0::2].astype(np.int64), ptr(n_feat)), shape=(n, d))
    Y = sp.csr_matrix((np.ones(len(y_idx), np.float32), y_idx.astype(np.int64), ptr(n_lab)), shape=(n, L))
    Y.sum_duplicates()  # a label listed twice in a row counts once (sorted, as the line reader does)
    Y.data[:] = 1.0
    return X, Y, np.arange(2, n + 2)


_TO_SPACE = bytes.maketrans(b",:", b"  ")
_ALLOWED = np.zeros(256, bool)
_ALLOWED[ord("0"):ord("9") + 1] = True
_ALLOWED[ord(".")] = True
_ALLOWED[[ord(c) for c in " \n,:"]] = True
_POW10 = 10.0 ** np.arange(16)  # exact in float64


def decimals(B: np.ndarray) -> np.ndarray | None:
    """Every unsigned decimal (`12`, `0.0845`) in the bytes B, in order, separated by any of ' \\n,:',
    as float64: the digits of a number as one integer N (exact below 2^53) divided by 10^k, k its
    digits after the point, i.e. one correctly rounded division, the value Python's float() gives.
    None when a byte or a number falls outside that (a sign, an exponent, 16+ digits, two points)."""
    if not _ALLOWED[B].all():
        return None
    dig = (B >= ord("0")) & (B <= ord("9"))
    dot = np.flatnonzero(B == ord("."))
    num = dig.copy()
    num[dot] = True                                                     # (N,) bytes inside a number
    edge = np.flatnonzero(np.diff(np.concatenate([[0], num.view(np.int8), [0]])))
    start, end = edge[0::2], edge[1::2]                                 # (n,) each number's bytes [start, end)
    t_dot = np.searchsorted(end, dot, side="right")                     # the number each point belongs to
    dots = np.bincount(t_dot, minlength=len(start))
    digits = end - start - dots                                         # (n,) digits per number
    if len(start) == 0 or digits.max() > 15 or dots.max() > 1 or digits.min() == 0:
        return None
    at = np.flatnonzero(dig)                                            # (nd,) digit positions, in order
    lo = np.cumsum(digits) - digits                                     # (n,) index in `at` of each number's first digit
    N = np.zeros(len(start))
    for j in range(int(digits.max())):                                  # Horner over the j-th digits, exact in float64
        live = np.flatnonzero(digits > j)
        N[live] = N[live] * 10 + (B[at[lo[live] + j]] - ord("0"))
    k = np.zeros(len(start), np.int64)                                  # digits after the point
    k[t_dot] = end[t_dot] - dot - 1
    return N / _POW10[k]
