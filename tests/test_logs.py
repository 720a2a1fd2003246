"""Interaction logs -> time-ordered sequences: the paper's filters against a brute-force reference,
and the three raw layouts of MIDX Table 6 (MovieLens-10M, Amazon ratings CSV, SNAP Gowalla)."""

import gzip
from collections import Counter
from datetime import datetime, timezone

import numpy as np
import pytest

from xcbench.data import logs
from xcbench.data.readers import FormatError


def brute_force(records, min_rating, k, max_len):
    """records: (user, item, rating, time) in file order -> sequences, the slow obvious way."""
    rows = [(n, *r) for n, r in enumerate(records) if min_rating is None or r[2] > min_rating]
    while True:
        uc, ic = Counter(x[1] for x in rows), Counter(x[2] for x in rows)
        kept = [x for x in rows if uc[x[1]] >= k and ic[x[2]] >= k]
        if len(kept) == len(rows):
            break
        rows = kept
    nat = lambda s: (0, int(s)) if s.isdigit() else (1, s)  # noqa: E731
    item_id = {it: j for j, it in enumerate(sorted({x[2] for x in rows}, key=nat))}
    out = []
    for user in sorted({x[1] for x in rows}, key=nat):
        mine = sorted((x for x in rows if x[1] == user), key=lambda x: (x[4], x[0]))
        s = [item_id[x[2]] for x in mine]
        out.append(s[-max_len:] if max_len else s)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_filters_match_brute_force(tmp_path, seed):
    rng = np.random.default_rng(seed)
    pu, pi = 1 / np.arange(1, 61), 1 / np.arange(1, 81)  # skewed: the k-core drops the tails
    us, its = rng.choice(60, 1500, p=pu / pu.sum()), rng.choice(80, 1500, p=pi / pi.sum())
    recs = [(f"u{u}", str(i), float(rng.integers(1, 6)), float(rng.integers(50)))
            for u, i in zip(us, its)]  # times repeat: ties must keep file order
    f = tmp_path / "ratings.dat"
    f.write_text("".join(f"{u}::{i}::{r:g}::{t:g}\n" for u, i, r, t in recs))
    layout = {"sep": "::", "columns": ["user_id", "item_id", "rating", "timestamp"]}
    for min_rating, k, max_len in [(3, 10, None), (None, 5, 20), (2, 8, 7)]:
        got = [s.tolist() for s in logs.log_sequences(f, min_rating, k, max_len, **layout)]
        want = brute_force(recs, min_rating, k, max_len)
        assert got == want and 0 < len(want) < len({r[0] for r in recs})  # some users kept, some dropped


def test_k_core_cascades(tmp_path):
    # 2-core: item c has one record, dropping it leaves user z with one record, so z goes too,
    # which leaves item b with one record, so b goes: only users x, y with item a remain
    lines = ["x,a,5,1", "y,a,5,2", "x,a,5,3", "y,a,5,4", "z,b,5,5", "z,c,5,6", "w,b,5,7"]
    f = tmp_path / "ratings_Books.csv"
    f.write_text("\n".join(lines) + "\n")
    seqs = logs.log_sequences(f, 3, 2, None, sep=",", columns=["user_id", "item_id", "rating", "timestamp"])
    assert [s.tolist() for s in seqs] == [[0, 0], [0, 0]]


def test_gowalla_checkins_gz_iso_time(tmp_path):
    # user, ISO time, lat, lon, location; the file lists each user's check-ins newest first
    rows = [("0", "2010-10-19T23:55:27Z", "1"), ("0", "2010-10-18T22:17:43Z", "2"), ("0", "2010-10-17T23:42:03Z", "1"),
            ("1", "2010-10-20T10:00:00Z", "2"), ("1", "2009-01-01T00:00:00Z", "1")]
    f = tmp_path / "loc-gowalla_totalCheckins.txt.gz"
    with gzip.open(f, "wt") as g:
        g.write("".join(f"{u}\t{t}\t30.2\t-97.7\t{loc}\n" for u, t, loc in rows))
    layout = {"sep": "\t", "columns": ["user_id", "timestamp", "-", "-", "item_id"], "time": "iso"}
    u, i, r, t, users, items = logs.read_log(f, **layout)
    assert r is None and t[0] == datetime(2010, 10, 19, 23, 55, 27, tzinfo=timezone.utc).timestamp()
    seqs = logs.log_sequences(f, None, 1, None, **layout)  # no rating: every check-in counts, repeats stay
    assert [s.tolist() for s in seqs] == [[0, 1, 0], [0, 1]]


def test_recbole_header_is_the_default(tmp_path):
    f = tmp_path / "x.inter"
    f.write_text("item_id:token\tuser_id:token\ttimestamp:float\trating:float\n7\t1\t5\t4\n3\t1\t2\t4\n7\t2\t1\t1\n")
    assert [s.tolist() for s in logs.log_sequences(f, 3, 1)] == [[0, 1]]


def test_bad_line_names_file_line_and_layout(tmp_path):
    f = tmp_path / "ratings.dat"
    f.write_text("1::2::5::100\n1::2::five::101\n")
    with pytest.raises(FormatError, match=r"ratings.dat:2: .*expected user_id::item_id::rating::timestamp"):
        logs.read_log(f, sep="::", columns=["user_id", "item_id", "rating", "timestamp"])
    with pytest.raises(ValueError, match="must name user_id, item_id and timestamp"):
        logs.read_log(f, sep="::", columns=["user", "item_id", "rating", "timestamp"])
