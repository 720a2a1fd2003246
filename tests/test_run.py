"""run.py: a run as one value (make_run, job_run), which runs an experiment has (expected_runs, the seeds its
views add) and where each one lives (run_location: runs of equal settings train once)."""

from pathlib import Path

import pytest

from xcbench.config import ROOT, ConfigError, load_experiment, resolve_experiment
from xcbench.io import write_yaml
from xcbench.run import expected_runs, job_run, make_run, run_location, view_runs


def _write(tmp_path, name, obj):
    write_yaml(tmp_path / f"{name}.yaml", obj)
    return tmp_path / f"{name}.yaml"


def test_a_view_may_add_seeds_that_its_owner_trains(tmp_path):
    """table2_seeds (runs_of fig2, seeds [0, 1]): the view's extra seeds are the owner's runs, in the owner's folder;
    no other method gets them."""
    owner = {"paper": "p", "artifact": "own", "title": "t", "task": "multiclass", "seeds": [0], "datasets": ["a"],
             "render": {"kind": "table", "renderer": "metric_table"}, "model": {"encoder": {"name": "mlp", "hidden": 8}},
             "methods": {"m1": {"head": "full_softmax"}, "m2": {"head": "full_softmax"}}}
    _write(tmp_path, "own", owner)
    _write(tmp_path, "view", {"paper": "p", "artifact": "view", "title": "v", "runs_of": "own", "methods": ["m2"],
                              "seeds": [0, 1], "render": {"kind": "table", "renderer": "metric_table"}})
    assert view_runs(tmp_path / "own.yaml", "paper") == {("a", "m2", 0), ("a", "m2", 1)}
    assert view_runs(tmp_path / "view.yaml", "paper") == set()
    v = resolve_experiment(load_experiment(tmp_path / "view.yaml"), "paper")
    v["source"] = str(tmp_path / "view.yaml")
    assert expected_runs(v) == [("a", "m2", 0), ("a", "m2", 1)] and run_location(v, "a", "m2", 1) == ("own", "m2")


def test_runs_of_equal_settings_train_once(tmp_path):
    """Two artifacts with a run of equal settings (names and labels aside) read one run, the table's;
    a changed learning rate makes it a run of its own."""
    method = {"head": "softmax", "params": {}}
    common = {"paper": "p", "title": "t", "task": "xmc", "datasets": ["a"], "seeds": [0], "train": {"epochs": 1, "lr": 0.1},
              "model": {"encoder": {"name": "linear"}}}
    fig = {**common, "artifact": "fig1", "render": {"kind": "figure", "renderer": "sweep"},
           "methods": {"full_point": {**method, "label": "x", "x": 1}}}
    _write(tmp_path, "fig1", fig)
    _write(tmp_path, "table2", {**common, "artifact": "table2", "render": {"kind": "table", "renderer": "metric_table"},
                                "methods": {"full": method}})
    exp = resolve_experiment(load_experiment(tmp_path / "fig1.yaml"), "paper")
    assert run_location(exp, "a", "full_point", 0) == ("table2", "full")
    exp = resolve_experiment(load_experiment(tmp_path / "table2.yaml"), "paper")
    assert run_location(exp, "a", "full", 0) == ("table2", "full")
    _write(tmp_path, "fig1", {**fig, "train": {"epochs": 1, "lr": 0.2}})
    exp = resolve_experiment(load_experiment(tmp_path / "fig1.yaml"), "paper")
    assert run_location(exp, "a", "full_point", 0) == ("fig1", "full_point")


def test_shared_runs_of_the_kept_sweeps():
    """The sweeps' points that a table or an earlier figure trains are read from there (no copy trained)."""
    cases = [("midx/fig3b", "ptb", "pq_K32", "paper", ("table4", "lstm_midx_pq")),
             ("midx/table5", "ptb", "midx_rq", "paper", ("table4", "lstm_midx_rq")),
             ("class_selection/fig5", "synthetic-faces-87k", "hf_L50", "paper", ("fig2", "hf_1")),
             ("class_selection/fig6", "synthetic-faces-87k", "random_1", "paper", ("fig2", "random_1")),
             ("class_selection/fig6", "synthetic-faces-10k", "hf_T100", "quick", ("fig6", "hf_T100"))]
    for name, d, m, scale, where in cases:
        exp = resolve_experiment(load_experiment(ROOT / "config" / "experiments" / f"{name}.yaml"), scale)
        assert run_location(exp, d, m, 0) == where, (name, m, scale)


def test_a_run_holds_its_resolved_settings_and_its_spec(tmp_path):
    """make_run: the per_dataset override and the method's own settings win (runspec.method_config), the spec
    carries them and names the run; an unknown method fails naming the experiment's methods."""
    f = _write(tmp_path, "own", {"paper": "p", "artifact": "own", "title": "t", "task": "multiclass", "seeds": [0, 1],
                                  "datasets": ["a", "b"], "render": {"kind": "table", "renderer": "metric_table"},
                                  "train": {"epochs": 2, "batch_size": 4, "lr": 0.1},
                                  "per_dataset": {"b": {"train": {"lr": 0.5}}},
                                  "methods": {"m": {"head": "full_softmax", "train": {"epochs": 3}}}})
    exp = resolve_experiment(load_experiment(f), "paper")
    r = make_run(exp, "b", "m", 1)
    assert r.train == {"epochs": 3, "batch_size": 4, "lr": 0.5} and r.spec["train"] == r.train
    assert (r.spec["dataset"], r.spec["method"], r.spec["seed"], r.label) == ("b", "m", 1, "b/m")
    assert r.hash != make_run(exp, "a", "m", 1).hash and r.hash == make_run(exp, "b", "m", 1).hash
    assert r.folder("res") == Path("res/paper/p/own/b/m/seed1")
    with pytest.raises(ConfigError, match="its methods: m"):
        make_run(exp, "b", "nope", 0)


def test_a_train_job_names_one_of_the_experiments_runs(tmp_path):
    """job_run: a stale target (a seed or dataset the experiment does not run) fails saying what the method runs."""
    f = _write(tmp_path, "own", {"paper": "p", "artifact": "own", "title": "t", "task": "multiclass", "seeds": [0],
                                  "datasets": ["a"], "render": {"kind": "table", "renderer": "metric_table"},
                                  "methods": {"m": {"head": "full_softmax"}}})
    exp = resolve_experiment(load_experiment(f), "paper")
    assert job_run(f, exp, "a", "m", 0).spec == make_run(exp, "a", "m", 0).spec
    with pytest.raises(ConfigError, match=r"seed 3 .*stale target.*runs on a with seeds \[0\]"):
        job_run(f, exp, "a", "m", 3)
    with pytest.raises(ConfigError, match="method 'x' is not in this experiment"):
        job_run(f, exp, "a", "x", 0)
