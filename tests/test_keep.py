"""`xcbench keep`: finished runs copied into a kept tree as they are; a cut run, a stale one, or one not where
today's files put it is refused with its reason, and then nothing is copied."""

import shutil

import pytest
import torch
from conftest import REPO, train_run

from xcbench.config import ConfigError, load_experiment, resolve_experiment
from xcbench.io import read_yaml, write_yaml
from xcbench.keep import keep
from xcbench.tasks.base import make_task

SEQREC = REPO / "config" / "experiments" / "xcbench" / "seqrec.yaml"


def _run(tmp_path, prepared, method):
    processed, entry = prepared("synthetic-seq-tiny")
    exp = resolve_experiment(load_experiment(SEQREC), "tiny")
    task = make_task(exp, entry, processed, None, torch.device("cpu"), 0, dataset="synthetic-seq-tiny")
    out = tmp_path / "results" / "tiny" / "xcbench" / "seqrec" / "synthetic-seq-tiny" / method / "seed0"
    train_run(exp, task, "synthetic-seq-tiny", method, 0, out, torch.device("cpu"))
    return out


def test_keep_copies_finished_runs_and_refuses_stale_or_cut_ones(tmp_path, prepared):
    a, b = _run(tmp_path, prepared, "full_chunked"), _run(tmp_path, prepared, "hsm")
    grid = a.parents[3] / "seqrec_lr" / "synthetic-seq-tiny" / "full_chunked.lr0.001" / "seed0"  # the table's run
    shutil.copytree(a, grid)
    root = tmp_path / "kept"
    dst = keep([a], root)
    assert dst == [root / "results" / "tiny" / "xcbench" / "seqrec" / "synthetic-seq-tiny" / "full_chunked" / "seed0"]
    for name in ("metrics.json", "history.csv", "config.resolved.yaml"):
        assert (dst[0] / name).read_bytes() == (a / name).read_bytes()
    cfg = read_yaml(b / "config.resolved.yaml")
    write_yaml(b / "config.resolved.yaml", {**cfg, "train": {**cfg["train"], "lr": 0.5}})
    (a / "metrics.json").unlink()
    with pytest.raises(ConfigError) as e:
        keep([b, a, grid], tmp_path / "kept2")
    assert "hsm/seed0: trained with other settings than today's" in str(e.value) and "train.lr: 0.5 -> " in str(e.value)
    assert "full_chunked/seed0: not finished: no metrics.json" in str(e.value)
    assert "full_chunked.lr0.001/seed0: today's experiment files put this run under seqrec/synthetic-seq-tiny/full_chunked" in str(e.value)
    assert not (tmp_path / "kept2").exists()  # nothing copied
