"""Faults and bad input (issue: checkpoints that know their run, no shell injection, no silent bad data):
each test fails on the code before the fix."""

import copy
import os
import stat

import pytest
import torch
from conftest import train_run

from xcbench.config import normalise_methods
from xcbench.io import write_text
from xcbench.tasks.base import make_task

DEV = torch.device("cpu")


def _run(tiny_xmc, exp, out, **kw):
    processed, feats, entry = tiny_xmc
    exp = copy.deepcopy(exp)
    exp["methods"] = normalise_methods(exp["methods"])
    task = make_task(exp, entry, processed, feats, DEV, 0)
    return train_run(exp, task, "synthetic-xmc-tiny", next(iter(exp["methods"])), 0, out, DEV, **kw)


def test_checkpoint_of_other_settings_is_not_resumed(tiny_xmc, tiny_exp, tmp_path, capsys):
    """An epoch-1 checkpoint made with lr 1.0 under a run now configured with lr 0.01: the run starts
    afresh (warning naming train.lr), and its history is that of a clean run with lr 0.01."""
    other = copy.deepcopy(tiny_exp)
    other["train"]["lr"] = 1.0
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, other, tmp_path / "r", interrupt_after=1)
    tiny_exp["train"]["lr"] = 0.01
    got = _run(tiny_xmc, tiny_exp, tmp_path / "r")
    err = capsys.readouterr().err
    assert "other settings" in err and "train.lr: 1.0 -> 0.01" in err
    assert (tmp_path / "r" / "checkpoint.pt.stale").exists()
    clean = _run(tiny_xmc, tiny_exp, tmp_path / "clean")
    assert got["curves"] == clean["curves"] and got["metrics"] == clean["metrics"]


def test_presentation_changes_keep_the_checkpoint(tiny_xmc, tiny_exp, tmp_path, capsys, caplog):
    """Notes or a title are not settings: the run resumes (and --finish is not one either). The resumed run's
    log repeats the epoch recorded before the interruption (a DAG job's log file is rewritten on restart)."""
    import logging
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "r", interrupt_after=1)
    tiny_exp["notes"], tiny_exp["title"] = "a new paragraph", "another title"
    caplog.set_level(logging.INFO, logger="xcbench")
    caplog.clear()  # the cut run's own lines, where an earlier test's cli.main left the logger at INFO
    got = _run(tiny_xmc, tiny_exp, tmp_path / "r")
    assert "resuming" in capsys.readouterr().out
    lines = [r.getMessage() for r in caplog.records if " epoch " in r.getMessage() and "/3 loss=" in r.getMessage()]
    first = f"loss={got['curves']['train_loss'][0]:.4g}"
    assert [("epoch 1/3" in m, first in m, "(from the checkpoint)" in m) for m in lines] == \
        [(True, True, True), (False, False, False), (False, False, False)]


def _damage(path, kind):
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"e" * 64 + os.urandom(64),
                      "zeros": b"\0" * len(data)}[kind])


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage", "zeros"])
def test_damaged_checkpoint_is_set_aside_and_the_run_restarts(tiny_xmc, tiny_exp, tmp_path, capsys, kind):
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "r", interrupt_after=1)
    ck = tmp_path / "r" / "checkpoint.pt"
    _damage(ck, kind)
    got = _run(tiny_xmc, tiny_exp, tmp_path / "r")
    err = capsys.readouterr().err
    assert str(ck) in err and "damaged" in err and "weights_only=False" not in err
    assert (tmp_path / "r" / "checkpoint.pt.bad").exists()
    assert got["metrics"] == _run(tiny_xmc, tiny_exp, tmp_path / "clean")["metrics"]


def test_a_write_cut_by_sigkill_leaves_no_temp_file_after_the_resume(tiny_xmc, tiny_exp, tmp_path):
    """SIGKILL inside torch.save runs no `finally`: the temp file beside the checkpoint survives the
    process. The resumed run sweeps it, and leaves other dot-files (not ours) alone."""
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "r", interrupt_after=1)
    cut = tmp_path / "r" / ".checkpoint.pt.k3j9x_q1.tmp"
    cut.write_bytes(b"half a checkpoint")
    foreign = tmp_path / "r" / ".keep"
    foreign.write_text("")
    _run(tiny_xmc, tiny_exp, tmp_path / "r")
    assert not cut.exists() and foreign.exists()
    assert (tmp_path / "r" / "metrics.json").exists()


def test_written_files_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_bow_with_nan_or_inf_is_rejected_at_its_line(tmp_path):
    from xcbench.data.readers import FormatError, read_xc_bow
    for bad in ("nan", "inf", "-inf"):
        f = tmp_path / f"{bad}.txt"
        f.write_text(f"3 5 4\n0 1:1\n1 2:{bad} 3:1\n2 4:1\n")
        with pytest.raises(FormatError, match=rf"{f}:3: feature value .* is not finite"):
            read_xc_bow(f)


def test_bow_cut_mid_line_says_it_looks_truncated(tmp_path):
    from xcbench.data.readers import FormatError, read_xc_bow
    f = tmp_path / "cut.txt"
    f.write_text("3 5 4\n0 1:1\n1 2:1\n2 4:")
    with pytest.raises(FormatError, match=rf"{f}:4: .*looks truncated"):
        read_xc_bow(f)


def test_fast_bow_reader_equals_the_line_reader_on_mirrored_sets():
    """The vectorised path and the line-by-line path give identical matrices on every XC BOW file in
    the mirror (Bibtex, Delicious: both splits)."""
    from pathlib import Path

    import numpy as np

    from xcbench.data import readers, xc_text
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    files = [f for d in ("bibtex", "delicious") for f in sorted((shared / d).glob("*.txt"))
             if all(t.isdigit() for t in f.open(encoding="utf-8").readline().split()[:3])
             and len(f.open(encoding="utf-8").readline().split()) == 3]
    if not files:
        pytest.skip("no XC BOW files in ../shared/data")
    for f in files:
        text = f.read_text(encoding="utf-8")
        a, b = xc_text.parse_fast(text)[:2], readers._parse_lines(f, text)[:2]
        for u, v in zip(a, b):
            assert u.shape == v.shape and np.array_equal(u.indptr, v.indptr) and np.array_equal(u.indices, v.indices)
            assert np.array_equal(u.data, v.data)


def test_file_without_published_hash_is_recorded_then_checked(tmp_path, capsys):
    """No sha256 in the catalogue: the first fetch records one (with a loud warning); a later fetch of
    a different file under that name is refused."""
    from xcbench.data.fetch import RECORDED, FetchError, fetch_dataset
    mirror = tmp_path / "mirror" / "ds"
    mirror.mkdir(parents=True)
    (mirror / "a.bin").write_bytes(b"first")
    entry = {"name": "ds", "files": [{"name": "a.bin", "urls": []}]}
    fetch_dataset(entry, tmp_path / "raw" / "ds", [tmp_path / "mirror"])
    assert "WARNING" in capsys.readouterr().err and (tmp_path / "raw" / RECORDED).exists()
    (mirror / "a.bin").write_bytes(b"tampered")
    (tmp_path / "raw" / "ds" / "a.bin").unlink()
    with pytest.raises(FetchError, match="recorded at its first fetch"):
        fetch_dataset(entry, tmp_path / "raw" / "ds", [tmp_path / "mirror"])


def _exp_file(tmp_path, methods, train=None, datasets=("synthetic-xmc-tiny",)):
    from xcbench.io import write_yaml
    exp = {"paper": "p", "artifact": "a", "title": "t", "task": {"name": "xmc", "params": {}},
           "datasets": list(datasets), "seeds": [0], "methods": methods,
           "render": {"kind": "table", "renderer": "metric_table"},
           "train": train or {"epochs": 1, "batch_size": 4, "lr": 0.1}}
    write_yaml(tmp_path / "a.yaml", exp)
    return tmp_path / "a.yaml"


def test_shell_metacharacters_in_a_method_key_are_rejected_when_loading(tmp_path):
    """A method key `m$(touch${IFS}X)` would run `touch` in an unquoted shell rule: the schema refuses
    it before any job is planned (and every rule quotes its wildcards)."""
    from xcbench.config import ConfigError, load_experiment
    f = _exp_file(tmp_path, {"m$(touch${IFS}X)": {"head": "full_softmax"}})
    with pytest.raises(ConfigError, match=r"does not match"):
        load_experiment(f)
    f = _exp_file(tmp_path, {"ok": {"head": "full_softmax"}}, datasets=["d;rm -rf x"])
    with pytest.raises(ConfigError, match=r"datasets/0"):
        load_experiment(f)
    from pathlib import Path
    rules = "".join(p.read_text() for p in (Path(__file__).resolve().parents[1] / "workflow" / "rules").glob("*.smk"))
    import re
    assert not re.findall(r"\{wildcards\.\w+\}", rules), "every wildcard in a shell command is quoted ({...:q})"


@pytest.mark.parametrize("train,what", [({"lr": -1.0}, "lr"), ({"lr": "1.0x"}, "lr"), ({"epochs": 0}, "epochs"),
                                        ({"batch_size": 0}, "batch_size")])
def test_bad_method_level_train_settings_fail_at_load(tmp_path, train, what):
    from xcbench.config import ConfigError, load_experiment
    f = _exp_file(tmp_path, {"m": {"head": "full_softmax", "train": train}})
    with pytest.raises(ConfigError) as e:
        load_experiment(f)
    assert f"methods/m/train/{what}" in str(e.value) and "Unevaluated" not in str(e.value)


def test_per_scale_error_has_no_misleading_unevaluated_line(tmp_path):
    from xcbench.config import ConfigError, load_experiment
    from xcbench.io import read_yaml, write_yaml
    f = _exp_file(tmp_path, {"m": {"head": "full_softmax"}})
    exp = read_yaml(f)
    exp["scales"] = {"quick": {"datasets": ["synthetic-xmc-tiny"], "train": {"lr": -1}}}
    write_yaml(f, exp)
    with pytest.raises(ConfigError) as e:
        load_experiment(f)
    assert "scales/quick/train/lr" in str(e.value) and "Unevaluated" not in str(e.value)


@pytest.mark.parametrize("params", [{"m": 0}, {"m": -3}])
def test_sampled_softmax_m_below_one_is_refused(params):
    from xcbench.heads.sampled_softmax import SampledSoftmax
    with pytest.raises(ValueError, match="params.m must be"):
        SampledSoftmax(4, 10, torch.Generator().manual_seed(0), **params)


def test_yaml_syntax_error_names_file_and_line_without_traceback(tmp_path):
    import subprocess
    import sys
    f = tmp_path / "a.yaml"
    f.write_text("paper: p\nmethods: {a: [1, 2\ntitle: t\n")
    r = subprocess.run([sys.executable, "-m", "xcbench", "train", "--experiment", str(f), "--dataset", "d",
                        "--method", "a", "--processed", "x", "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{f}:" in r.stderr and "YAML syntax error" in r.stderr


def test_a_key_twice_in_one_mapping_is_refused_with_both_lines(tmp_path):
    """YAML keeps the last of two equal keys and drops the first without a word (a second `why_not:` under one
    claim replaced the first); keys a `<<: *anchor` merge brings in may still be overridden, at any depth."""
    from xcbench.io import YAMLSyntaxError, read_yaml
    f = tmp_path / "c.yaml"
    f.write_text("claims:\n  - id: a\n    why_not: {quick: x}\n    text: t\n    why_not: {paper: y}\n")
    with pytest.raises(YAMLSyntaxError, match=rf"{f}:5: key 'why_not' appears twice in one mapping \(first at line 3\)"):
        read_yaml(f)
    f.write_text("base: &b {lr: 1, m: 2}\nrun: {<<: *b, lr: 3}\nnested: {a: {x: 1, y: 2, x: 3}}\n")
    with pytest.raises(YAMLSyntaxError, match="key 'x' appears twice"):
        read_yaml(f)
    f.write_text("base: &b {lr: 1, m: 2}\nrun: {<<: *b, lr: 3}\n")
    assert read_yaml(f) == {"base": {"lr": 1, "m": 2}, "run": {"lr": 3, "m": 2}}


def test_train_target_not_in_the_experiment_is_refused(tmp_path, tiny_xmc):
    import subprocess
    import sys
    processed, feats, _ = tiny_xmc
    f = _exp_file(tmp_path, {"m": {"head": "full_softmax"}})
    r = subprocess.run([sys.executable, "-m", "xcbench", "train", "--experiment", str(f), "--scale", "tiny",
                        "--dataset", "gone-dataset", "--method", "m", "--processed", str(processed),
                        "--features", str(feats), "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 1 and "no run of method 'm' on dataset 'gone-dataset'" in r.stderr
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_train_without_features_names_the_exact_file_to_build(tmp_path, tiny_xmc):
    """`xcbench train` on a run that reads features, without --features: the error names the file the experiment's
    `features:` gives (extractor and dim), before any data is read and nothing written."""
    import subprocess
    import sys
    processed, _, _ = tiny_xmc
    f = _exp_file(tmp_path, {"m": {"head": "full_softmax"}})
    from xcbench.io import read_yaml, write_yaml
    write_yaml(f, {**read_yaml(f), "features": {"extractor": "tfidf_svd", "dim": 24}})
    r = subprocess.run([sys.executable, "-m", "xcbench", "train", "--experiment", str(f), "--scale", "tiny",
                        "--dataset", "synthetic-xmc-tiny", "--method", "m", "--processed", str(processed),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "--features data/features/synthetic-xmc-tiny/tfidf_svd24.pt" in r.stderr
    assert not (tmp_path / "o").exists()


def test_features_path_only_where_the_format_needs_an_extractor():
    """The one spelling of a feature file (DAG, train's error, benchmarks): dim 512 by default, and none for a
    dataset whose samples are vectors already, whatever the experiment's `features:` says."""
    from xcbench.catalogue import features_path
    bow, vec = {"name": "d", "format": "xc_bow"}, {"name": "f", "format": "synthetic_faces"}
    assert features_path({"extractor": "tfidf_svd"}, bow) == "data/features/d/tfidf_svd512.pt"
    assert features_path({"extractor": "tfidf_svd", "dim": 64}, bow, "/x/data") == "/x/data/features/d/tfidf_svd64.pt"
    assert features_path({"extractor": "tfidf_svd"}, vec) is None
    assert features_path(None, bow) is None


def test_train_accepts_a_seed_that_a_view_adds_and_no_other():
    """`xcbench train` validates its target against the file's runs and its views' (table2_seeds adds seed 1 to
    four of fig2's methods): hf_5 with seed 1 is still refused (checked before any data is read)."""
    import subprocess
    import sys

    from xcbench.run import view_runs

    fig2 = "config/experiments/class_selection/fig2.yaml"
    assert ("synthetic-faces-87k", "hf_a", 1) in view_runs(fig2, "paper")
    train = lambda m: subprocess.run([sys.executable, "-m", "xcbench", "train", "--experiment", fig2, "--scale",  # noqa: E731
                                      "paper", "--dataset", "synthetic-faces-87k", "--method", m, "--seed", "1",
                                      "--processed", "no/such/dataset.npz", "--out", "none"], capture_output=True, text=True)
    r = train("hf_5")
    assert r.returncode == 1 and "no run of method 'hf_5' on dataset 'synthetic-faces-87k' with seed 1" in r.stderr
    r = train("hf_a")  # accepted: it gets as far as reading the (missing) data
    assert r.returncode == 1 and "no run of method" not in r.stderr and "no/such/dataset.npz" in r.stderr


def test_equal_objects_saved_twice_give_equal_files(tmp_path):
    """io.torch_save writes through a temp file of a random name; the archive inside must not carry that name, or
    two builds of the same features have other bytes and a run's `inputs` digest (records.input_digests) would
    name its features as changed when they are not."""
    import hashlib

    import torch

    from xcbench.io import torch_save

    obj = {"train": torch.arange(12.0).reshape(3, 4), "meta": {"dim": 4}}
    torch_save(tmp_path / "a.pt", obj)
    (tmp_path / "b").mkdir()
    torch_save(tmp_path / "b" / "a.pt", obj)   # the same file name: only the temp file's random suffix differs
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert digest(tmp_path / "a.pt") == digest(tmp_path / "b" / "a.pt")
    assert torch.equal(torch.load(tmp_path / "a.pt")["train"], obj["train"])


def test_a_task_that_reads_features_without_them_says_which_flag(tiny_xmc, tiny_exp):
    """No --features for a task that reads them: an error naming the flag and the path to build, not torch.load's
    "'NoneType' object has no attribute 'seek'"."""
    from xcbench.config import ConfigError

    processed, _, entry = tiny_xmc
    exp = copy.deepcopy(tiny_exp)
    exp["methods"] = normalise_methods(exp["methods"])
    with pytest.raises(ConfigError, match=r"--features data/features/synthetic-xmc-tiny/"):
        make_task(exp, entry, processed, None, DEV, 0)
    exp["features"] = {"extractor": "tfidf_svd", "dim": 24}  # named by the experiment: that file, exactly
    with pytest.raises(ConfigError, match=r"--features data/features/synthetic-xmc-tiny/tfidf_svd24\.pt "):
        make_task(exp, entry, processed, None, DEV, 0)
