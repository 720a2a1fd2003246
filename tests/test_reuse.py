"""A run of settings identical to a finished run under another name is copied, not trained (reuse.py), and only
then: the copy equals what training it gives, and any change of a setting (lr, seed) is not reused."""

import copy
from pathlib import Path

import torch
from conftest import train_run

from xcbench.config import normalise_methods
from xcbench.io import read_json, read_yaml
from xcbench.reuse import copy_run, find_identical
from xcbench.run import make_run
from xcbench.tasks.base import make_task

DEV = torch.device("cpu")


def _exp(tiny_exp, artifact, method, lr=0.01):
    exp = copy.deepcopy(tiny_exp)
    exp.update(artifact=artifact, methods=normalise_methods({method: {"head": "full_softmax"}}))
    exp["train"]["epochs"] = 2
    exp["train"]["lr"] = lr
    return exp


def _folder(root, exp, method, seed=0):
    return root / "tiny" / "test" / exp["artifact"] / "synthetic-xmc-tiny" / method / f"seed{seed}"


def test_identical_run_is_found_copied_and_equals_training_it(tiny_xmc, tiny_exp, tmp_path):
    processed, feats, entry = tiny_xmc
    grid = _exp(tiny_exp, "grid", "full.lr0.01")
    task = make_task(grid, entry, processed, feats, DEV, 0)
    src = _folder(tmp_path, grid, "full.lr0.01")
    train_run(grid, task, "synthetic-xmc-tiny", "full.lr0.01", 0, src, DEV)
    table = _exp(tiny_exp, "table", "full")
    run = make_run(table, "synthetic-xmc-tiny", "full", 0)
    out = _folder(tmp_path, table, "full")
    assert find_identical(run, out) == src.resolve()
    copy_run(run, find_identical(run, out), out)
    trained = train_run(table, make_task(table, entry, processed, feats, DEV, 0), "synthetic-xmc-tiny", "full", 0,
                        tmp_path / "fresh", DEV)
    copied = read_json(out / "metrics.json")
    assert copied["metrics"] == trained["metrics"] and copied["curves"] == trained["curves"]
    assert copied["method"] == "full"
    # where from, as a path from the folder above the results tree: the same string in every clone
    assert not Path(copied["reused_from"]).is_absolute() and copied["reused_from"].endswith("grid/synthetic-xmc-tiny/full.lr0.01/seed0")
    assert (tmp_path.parent / copied["reused_from"]).resolve() == src.resolve()
    cfg = read_yaml(out / "config.resolved.yaml")
    assert cfg["artifact"] == "table" and cfg["method"] == "full" and cfg["train"]["lr"] == 0.01
    # another lr, another seed, or a folder outside a results tree: nothing to reuse
    other = _exp(tiny_exp, "table", "full", lr=0.003)
    assert find_identical(make_run(other, "synthetic-xmc-tiny", "full", 0), out) is None
    assert find_identical(make_run(table, "synthetic-xmc-tiny", "full", 1), _folder(tmp_path, table, "full", 1)) is None
    assert find_identical(run, tmp_path / "elsewhere") is None
    # the run's own folder is never its source; a copy is one for the next run of these settings
    (src / "metrics.json").unlink()
    assert find_identical(run, out) is None
    assert find_identical(make_run(grid, "synthetic-xmc-tiny", "full.lr0.01", 0), src) == out.resolve()


def test_an_older_record_is_reused_where_it_lacks_only_keys_that_are_none_today(tiny_exp, tmp_path):
    """A record written before the spec gained `features` (None for this task today) and the package version is the
    same run; one that lacks a key whose value today is set, or records another value, is not."""
    from xcbench.io import write_json, write_yaml

    table = _exp(tiny_exp, "table", "full")
    run = make_run(table, "synthetic-xmc-tiny", "full", 0)
    old = _folder(tmp_path, _exp(tiny_exp, "grid", "full.lr0.01"), "full.lr0.01")
    old.mkdir(parents=True)
    write_json(old / "metrics.json", {"method": "full.lr0.01"})
    today = {**run.spec, "features": None}
    out = _folder(tmp_path, table, "full")
    for rec, found in (({k: v for k, v in today.items() if k not in ("features", "xcbench")}, True),
                       ({**today, "xcbench": "0.0.1"}, True),
                       ({**today, "features": {"extractor": "tfidf_svd", "dim": 16}}, False),
                       ({k: v for k, v in today.items() if k != "train"}, False)):
        write_yaml(old / "config.resolved.yaml", {**rec, "artifact": "grid", "method": "full.lr0.01"})
        assert (find_identical(run, out) == old.resolve()) is found, rec.keys()
