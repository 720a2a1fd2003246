"""Faults and bad input (issue: checkpoints that know their run, no shell injection, no silent bad data):
each test fails on the code before the fix."""

import copy
import os
import stat

import pytest
import torch

from xcbench.config import normalise_methods
from xcbench.io import read_json, write_text
from xcbench.tasks.base import make_task
from xcbench.train import run

DEV = torch.device("cpu")


def _run(tiny_xmc, exp, out, **kw):
    processed, feats, entry = tiny_xmc
    exp = copy.deepcopy(exp)
    exp["methods"] = normalise_methods(exp["methods"])
    task = make_task(exp, entry, processed, feats, DEV, 0)
    return run(exp, task, "synthetic-xmc-tiny", next(iter(exp["methods"])), 0, out, DEV, **kw)


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


def test_presentation_changes_keep_the_checkpoint(tiny_xmc, tiny_exp, tmp_path, capsys):
    """Notes or a title are not settings: the run resumes (and --finish is not one either)."""
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "r", interrupt_after=1)
    tiny_exp["notes"], tiny_exp["title"] = "a new paragraph", "another title"
    _run(tiny_xmc, tiny_exp, tmp_path / "r")
    assert "resuming" in capsys.readouterr().out


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


def test_written_files_respect_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
