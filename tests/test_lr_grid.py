"""The learning-rate grid (xcbench/lr_grid.py, renderer `lr_grid`): its runs, its selection rule against a brute
force, and the caption's check that the tuned table runs each method at the grid's best lr."""

import itertools
import random

import pytest

from xcbench.config import ConfigError, load_experiment, resolve_experiment
from xcbench.io import write_json, write_yaml
from xcbench.lr_grid import best_lr, expand, selections, tuning_check
from xcbench.registry import RENDERERS
from xcbench.run import expected_runs, make_run, run_location
from xcbench.runspec import method_config

XC = "config/experiments/xcbench"


def test_expand_runs_every_method_at_every_lr_with_its_own_settings():
    methods = {"a": {"head": "full_softmax", "label": "A", "train": {"lr": 5.0, "epochs": 2}},
               "b": {"head": "bce", "series": "B line"}}
    out = expand(methods, [0.01, 0.001], {"paper": "p", "artifact": "g"})
    assert list(out) == ["a.lr0.001", "a.lr0.01", "b.lr0.001", "b.lr0.01"]
    assert out["a.lr0.01"]["train"] == {"lr": 0.01, "epochs": 2}  # the grid's lr wins over the method's own
    assert out["a.lr0.01"]["x"] == 0.01 and out["a.lr0.01"]["series"] == "A" and out["a.lr0.01"]["grid_of"] == "a"
    assert out["b.lr0.001"]["series"] == "B line" and out["b.lr0.001"]["head"] == "bce"
    with pytest.raises(ValueError, match="positive"):
        expand(methods, [0.0], {})
    # a table that states l*(d, m) per dataset: every grid point of m takes d's other overrides, never its lr
    exp = resolve_experiment({"paper": "p", "artifact": "g", "methods": methods, "lr_grid": [0.001, 0.01],
                              "datasets": ["d", "e"], "per_dataset": {"d": {"methods": {
                                  "a": {"train": {"lr": 0.5, "epochs": 3}, "params": {"k": 1}}}}}}, "quick",
                             check_libraries=False)
    spec, train, _ = method_config(exp, "d", "a.lr0.01")
    assert train == {"lr": 0.01, "epochs": 3} and spec["params"] == {"k": 1}
    spec, train, _ = method_config(exp, "e", "a.lr0.01")
    assert train == {"lr": 0.01, "epochs": 2} and "params" not in spec
    assert method_config(exp, "d", "b.lr0.001")[1] == {"lr": 0.001}
    with pytest.raises(ConfigError, match="lr_grid must list positive"):  # resolving says which experiment
        resolve_experiment({"paper": "p", "artifact": "g", "methods": methods, "lr_grid": [-1.0]}, "quick",
                           check_libraries=False)


@pytest.mark.parametrize("artifact, table", [("xmc_lr", "xmc"), ("lm_lr", "lm"), ("seqrec_lr", "seqrec"),
                                              ("faces_lr", "faces")])
def test_grid_runs_train_at_their_lr_and_share_the_tables_seed_zero_run(artifact, table):
    """Each grid run trains at its lr; the one at the table's lr is the table's seed-0 run (trained once, under the
    table); at the tiny scale the grid adds no run at all (CI's time)."""
    for scale in ("tiny", "quick", "paper"):
        grid = resolve_experiment(load_experiment(f"{XC}/{artifact}.yaml"), scale, check_libraries=False)
        tab = resolve_experiment(load_experiment(f"{XC}/{table}.yaml"), scale, check_libraries=False)
        assert grid["seeds"] == [0]
        assert {s["grid_of"] for s in grid["methods"].values()} == set(tab["methods"])
        for d, m, s in expected_runs(grid):
            spec = grid["methods"][m]
            run = make_run(grid, d, m, s)
            assert run.train["lr"] == spec["x"]
            base = make_run(tab, d, spec["grid_of"], 0)
            shared = run_location(grid, d, m, s) == (table, spec["grid_of"])
            assert shared == (base.train["lr"] == spec["x"]), (scale, d, m)
        if scale == "tiny":
            assert all(run_location(grid, *r)[0] == table for r in expected_runs(grid))


def test_best_lr_is_the_brute_force_argbest_with_ties_to_the_smaller_lr():
    rng = random.Random(0)
    for _ in range(200):
        lrs = rng.sample([1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2], rng.randint(1, 6))
        pts = {lr: rng.choice([0.1, 0.2, 0.3, 0.4]) for lr in lrs}  # ties are common
        for better, pick in (("max", max), ("min", min)):
            best = pick(pts.values())
            assert best_lr(pts, better) == min(lr for lr in lrs if pts[lr] == best)
    with pytest.raises(ValueError):
        best_lr({0.1: 1.0}, "higher")


def test_selections_and_the_check_name_untuned_methods_and_edges():
    exp = {"render": {"better": "min"},
           "methods": expand({"a": {"head": "h"}, "b": {"head": "h"}}, [0.1, 0.3, 1.0], {})}
    means = {("d", "a.lr0.1"): 5.0, ("d", "a.lr0.3"): 4.0, ("d", "a.lr1"): 6.0,  # a: best 0.3, inside the grid
             ("d", "b.lr0.1"): 3.0, ("d", "b.lr0.3"): 4.0}  # b: best 0.1 at the edge, lr 1 not finished
    sel = selections(exp, means)
    assert sel[("d", "a")]["best"] == 0.3 and not sel[("d", "a")]["edge"] and sel[("d", "a")]["complete"]
    assert sel[("d", "b")]["best"] == 0.1 and sel[("d", "b")]["edge"] and not sel[("d", "b")]["complete"]
    text = tuning_check(sel, {("d", "a"): 0.3, ("d", "b"): 0.3}, "tab", label=str.upper)
    assert "runs the method at it: d: A 0.3." in text
    assert "Not tuned" in text and "d: B 0.1 (runs at 0.3)" in text
    assert "edge of the grid (a wider grid may do better): d: B." in text and "not finished (chosen among the finished lrs): d: B." in text
    assert "Not tuned" not in tuning_check(sel, {("d", "a"): 0.3, ("d", "b"): 0.1}, "tab")
    assert "No grid run has finished" in tuning_check({}, {}, "tab")


def test_lr_grid_figure_checks_the_table_it_tunes(tmp_path, catalogue):
    """A grid file that extends a table, fake grid results: the caption names the table's method run at another
    lr than its grid's best, and stops naming it once the table runs it at that lr."""
    base = {"paper": "p", "artifact": "tab", "title": "T", "task": {"name": "xmc"}, "datasets": ["d1"],
            "seeds": [0, 1], "train": {"epochs": 1, "batch_size": 8, "lr": 0.01},
            "methods": {"a": {"head": "full_softmax", "label": "Head A"}, "b": {"head": "bce", "label": "Head B"}},
            "render": {"kind": "table", "renderer": "metric_table", "metrics": ["P@1"]}}
    write_yaml(tmp_path / "exps" / "tab.yaml", base)
    write_yaml(tmp_path / "exps" / "grid.yaml", {
        "paper": "p", "artifact": "grid", "title": "G", "extends": "tab", "seeds": [0], "lr_grid": [0.001, 0.01, 0.1],
        "render": {"kind": "figure", "renderer": "lr_grid", "y": "final.val_P@1", "better": "max"}})
    exp = resolve_experiment(load_experiment(tmp_path / "exps" / "grid.yaml"), "quick", check_libraries=False)
    ys = {"a": [0.2, 0.5, 0.4], "b": [0.1, 0.2, 0.3]}  # a's best 0.01 (the table's lr), b's best 0.1 (an edge)
    for (m, vals), (i, lr) in itertools.product(ys.items(), enumerate([0.001, 0.01, 0.1])):
        folder = tmp_path / "res" / "quick" / "p" / "grid" / "d1" / f"{m}.lr{lr:g}" / "seed0"
        if run_location(exp, "d1", f"{m}.lr{lr:g}", 0)[0] == "tab":  # the table's seed-0 run holds it
            folder = tmp_path / "res" / "quick" / "p" / "tab" / "d1" / m / "seed0"
        write_json(folder / "metrics.json", {"metrics": {}, "final": {"val_P@1": vals[i]}})
    RENDERERS.get("lr_grid")(exp, str(tmp_path / "res"), str(tmp_path / "f"), catalogue)
    md = (tmp_path / "f.caption.md").read_text()
    assert "runs the method at it: d1: Head A 0.01." in md and "d1: Head B 0.1 (runs at 0.01)" in md and "Not tuned" in md
    assert "adam, constant schedule, 1 epochs, batch 8; lr: each run one of the grid's 0.001, 0.01, 0.1" in md
    assert "| d1 | Head A | 0.01 | 0.5 |" in md and "| d1 | Head B | 0.1 | 0.3 |" in md
    write_yaml(tmp_path / "exps" / "tab.yaml", {**base, "methods": {**base["methods"], "b": {
        "head": "bce", "label": "Head B", "train": {"lr": 0.1}}}})
    RENDERERS.get("lr_grid")(exp, str(tmp_path / "res"), str(tmp_path / "g"), catalogue)
    md = (tmp_path / "g.caption.md").read_text()
    assert "Not tuned" not in md and "d1: Head A 0.01, Head B 0.1." in md and "edge of the grid" in md
    tab = resolve_experiment(load_experiment(tmp_path / "exps" / "tab.yaml"), "quick", check_libraries=False)
    RENDERERS.get("metric_table")(tab, str(tmp_path / "res"), str(tmp_path / "t"), catalogue)
    md = (tmp_path / "t.md").read_text()
    assert "adam, constant schedule, 1 epochs, batch 8; lr by method: Head A: 0.01; Head B: 0.1" in md
