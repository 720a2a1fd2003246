"""Raw-format readers, including the errors that must name file and line."""

import numpy as np
import pytest

from xcbench.data import logs, readers, xc_text
from xcbench.data.readers import FormatError


def _write(p, text):
    p.write_text(text)
    return p


def test_xc_bow_parses_labels_features_and_labelless_lines(tmp_path):
    f = _write(tmp_path / "d.txt", "3 5 4\n0,2 0:1 3:0.5\n 1:2\n3 4:1 4:1\n")
    X, Y = readers.read_xc_bow(f)
    assert X.shape == (3, 5) and Y.shape == (3, 4)
    assert X.toarray().tolist() == [[1, 0, 0, 0.5, 0], [0, 2, 0, 0, 0], [0, 0, 0, 0, 2]]
    assert Y.toarray().tolist() == [[1, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1]]


def test_xc_bow_line_with_features_only(tmp_path):
    X, Y = readers.read_xc_bow(_write(tmp_path / "d.txt", "1 3 2\n0:1 2:3\n"))
    assert Y.nnz == 0 and X.toarray().tolist() == [[1, 0, 3]]


@pytest.mark.parametrize("body,line,what", [
    ("2 5 4\n0 1:1\n0,x 1:1\n", 3, "bad label list"),
    ("2 5 4\n0 1:1\n1 9:1\n", 3, "bad feature"),
    ("2 5 4\n0 1:1\n7 1:1\n", 3, "out of range"),
    ("2 5 4\n0 1:1\n1 2-1\n", 3, "bad feature"),
    ("3 5 4\n0 1:1\n1 2:1\n", 3, "header says 3 samples"),
    ("a b c\n0 1:1\n", 1, "expected header"),
])
def test_xc_bow_malformed_names_file_and_line(tmp_path, body, line, what):
    f = _write(tmp_path / "bad.txt", body)
    with pytest.raises(FormatError) as e:
        readers.read_xc_bow(f)
    assert f"{f}:{line}:" in str(e.value) and what in str(e.value)


@pytest.mark.parametrize("style", ["decimal", "exponent"])
def test_fast_bow_path_equals_the_line_reader(tmp_path, style):
    """Random files (label-less rows, repeated labels, values of 1-15 digits, or with exponents that the
    byte-level decimal parser leaves to numpy's): the vectorised path parses them, equal to the lines."""
    rng = np.random.default_rng(0)
    n, d, L = 300, 50, 20
    rows = []
    for i in range(n):
        labs = ",".join(map(str, rng.integers(0, L, rng.integers(0, 4))))
        vals = rng.random(rng.integers(1, 6)) * 10.0 ** rng.integers(-6, 4)
        fmt = (lambda v: f"{v:.{rng.integers(0, 12)}f}") if style == "decimal" else (lambda v: f"{v:.6g}")
        feats = " ".join(f"{j}:{fmt(v)}" for j, v in zip(rng.choice(d, len(vals), replace=False), vals))
        rows.append(f"{labs} {feats}".rstrip() if labs else f" {feats}")
    text = f"{n} {d} {L}\n" + "\n".join(rows) + "\n"
    f = _write(tmp_path / "r.txt", text)
    fast, lines = xc_text.parse_fast(text), readers._parse_lines(f, text)
    assert fast[0] is not None
    for u, v in zip(fast[:2], lines[:2]):
        assert u.shape == v.shape
        for k in ("indptr", "indices", "data"):
            assert np.array_equal(getattr(u, k), getattr(v, k)), k
    if style == "decimal":  # parsed at the byte level, to the value float() gives
        body = np.frombuffer(text.encode()[text.index("\n") + 1:], np.uint8)
        toks = text[text.index("\n") + 1:].replace(",", " ").replace(":", " ").split()
        assert np.array_equal(xc_text.decimals(body), np.array([float(t) for t in toks]))


@pytest.mark.parametrize("body", ["2 5 4\n0 1:1\n0,x 1:1\n", "2 5 4\n0 1:1\n1 2-1\n", "2 5 4\n0 1:1\n0,,1 1:1\n",
                                  "2 5 4\n0 1:1\n1 2:1:3\n", "2 5 4\n0 1:1\n1 2:\n", "2 5 4\n0 1:1\n1 2:1.2.3\n",
                                  "2 5 4\n0 1:1\n1 2:1", "3 5 4\n0 1:1\n1 2:1\n"])
def test_fast_bow_path_hands_malformed_files_to_the_line_reader(body):
    assert xc_text.parse_fast(body)[0] is None


def test_lm_text_vocab_and_eos(tmp_path):
    paths = {"train": _write(tmp_path / "tr.txt", "a b\nb c\n"), "valid": _write(tmp_path / "va.txt", "c a\n")}
    ids, vocab = readers.read_lm_text(paths)
    assert vocab == ["a", "b", "<eos>", "c"]
    assert ids["train"].tolist() == [0, 1, 2, 1, 3, 2]
    assert ids["valid"].tolist() == [3, 0, 2]


def test_lm_text_unknown_word_in_valid(tmp_path):
    paths = {"train": _write(tmp_path / "tr.txt", "a b\n"), "valid": _write(tmp_path / "va.txt", "a\nzz\n")}
    with pytest.raises(FormatError, match=r"va.txt:2: word 'zz'"):
        readers.read_lm_text(paths)


def test_interactions_filters_and_time_order(tmp_path):
    rows = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    # users u1,u2 rate items i1,i2 (rating 5) at decreasing times; u3 only has a rating 2 -> dropped
    for u in ("u1", "u2"):
        for i, t in (("i1", 30), ("i2", 10)):
            rows.append(f"{u}\t{i}\t5\t{t}")
    rows.append("u3\ti1\t2\t5")
    f = _write(tmp_path / "x.inter", "\n".join(rows) + "\n")
    seqs = logs.log_sequences(f, min_rating=3, k_core_min=2, max_len=20)
    assert [s.tolist() for s in seqs] == [[1, 0], [1, 0]]  # i2 (t=10) before i1 (t=30)
    assert [s.tolist() for s in logs.log_sequences(f, 3, 2, max_len=1)] == [[0], [0]]


def test_interactions_bad_line(tmp_path):
    f = _write(tmp_path / "x.inter", "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t2\tfive\t3\n")
    with pytest.raises(FormatError, match=r"x.inter:2:"):
        logs.log_sequences(f, None, 1, 20)


def test_user_item_lines(tmp_path):
    f = _write(tmp_path / "t.txt", "0 5 6\n1 7\n")
    out = readers.read_user_item_lines(f)
    assert {k: v.tolist() for k, v in out.items()} == {0: [5, 6], 1: [7]}
    # SASRec's files: one "user item" pair per line, in time order; a user's lines are joined in order
    pairs = readers.read_user_item_lines(_write(tmp_path / "p.txt", "1 9\n1 3\n2 4\n1 7\n"))
    assert {k: v.tolist() for k, v in pairs.items()} == {1: [9, 3, 7], 2: [4]}
    with pytest.raises(FormatError, match=r"bad.txt:1:"):
        readers.read_user_item_lines(_write(tmp_path / "bad.txt", "0 x\n"))


def test_real_mirror_files_parse_if_present(catalogue):
    """Bibtex and Delicious from ../shared/data parse with the header's sizes (skipped without a mirror)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "shared" / "data"
    f = root / "delicious" / "Delicious_test.txt"
    if not f.exists():
        pytest.skip("no ../shared/data mirror")
    X, Y = readers.read_xc_bow(f)
    assert X.shape == (3185, 500) and Y.shape == (3185, 983)
    assert np.all(np.diff(Y.indptr) >= 0)


def test_libsvm_multilabel_gives_the_xc_readers_matrices(tmp_path):
    """The same rows written both ways (header dropped, features from 1, a row without labels, a repeated
    label) read to the same X and Y; a compressed file reads the same; a 1-based label file says so."""
    import bz2

    from xcbench.data.readers import read_libsvm_multilabel, read_xc_bow

    xc = "3 5 4\n0,2 0:0.5 4:1.25\n 1:2\n3,3,1 2:0.0845 3:7\n"
    lib = "0,2 1:0.5 5:1.25\n2:2\n3,3,1 3:0.0845 4:7\n"
    (tmp_path / "a.txt").write_text(xc)
    (tmp_path / "a.svm").write_text(lib)
    (tmp_path / "a.bz2").write_bytes(bz2.compress(lib.encode()))
    X0, Y0 = read_xc_bow(tmp_path / "a.txt")
    for f in ("a.svm", "a.bz2"):
        X, Y = read_libsvm_multilabel(tmp_path / f, n_features=5, n_labels=4)
        assert (X != X0).nnz == 0 and (Y != Y0).nnz == 0 and X.dtype == np.float32
    (tmp_path / "b.svm").write_text("1,4 1:1\n")
    with pytest.raises(FormatError, match=r"b.svm:1: label id out of range.*label_base"):
        read_libsvm_multilabel(tmp_path / "b.svm", n_features=5, n_labels=4)
    X, Y = read_libsvm_multilabel(tmp_path / "b.svm", n_features=5, n_labels=4, label_base=1)
    assert Y.indices.tolist() == [0, 3]
    (tmp_path / "c.svm").write_text("0 1:1\n0 0:1\n")
    with pytest.raises(FormatError, match=r"c.svm:2: bad feature '0:1'"):
        read_libsvm_multilabel(tmp_path / "c.svm", n_features=5, n_labels=4)
