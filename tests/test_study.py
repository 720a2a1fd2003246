"""xcbench.study: a table's run with one setting changed (head, head params, lr) names the change in its spec, and
trained through train_changed it is the run `xcbench train` makes of that spec, paused and resumed or whole."""

import json

import torch

from xcbench.run import make_run
from xcbench.runspec import spec_hash
from xcbench.study import changed, mean_sd, train_changed
from xcbench.train import FitOptions, execute


def _exp(tiny_exp):
    tiny_exp["methods"]["full_softmax"]["params"] = {"bias_init": "zero"}
    return {**tiny_exp, "source": "test"}


def test_changed_names_the_change_in_the_spec(tiny_exp):
    exp = _exp(tiny_exp)
    base = make_run(exp, "synthetic-xmc-tiny", "full_softmax", 0)
    same = changed(make_run(exp, "synthetic-xmc-tiny", "full_softmax", 0))
    assert spec_hash(same.spec) == spec_hash(base.spec)
    run = changed(make_run(exp, "synthetic-xmc-tiny", "full_softmax", 0), head="sampled_softmax",
                  params={"m": 5}, lr=0.5)
    assert run.head["head"] == run.spec["head"] == "sampled_softmax"
    assert run.head["params"] == run.spec["head_params"] == {"bias_init": "zero", "m": 5}  # merged over its own
    assert run.train["lr"] == run.spec["train"]["lr"] == 0.5
    assert spec_hash(run.spec) != spec_hash(base.spec)


def test_mean_sd_is_the_sample_sd():
    assert mean_sd([1.0, 2.0, 3.0], 3) == "2.000 +- 1.000"
    assert mean_sd([0.5], 2) == "0.50 (one seed)"   # a seed-0 first pass renders instead of failing in stdev


def test_train_changed_pauses_resumes_and_equals_the_direct_run(tiny_exp, tiny_xmc, tmp_path):
    processed, features, entry = tiny_xmc
    exp = _exp(tiny_exp)
    change = {"params": {"bias_init": "log_prior"}, "lr": 0.02}
    out = tmp_path / "study"
    assert train_changed(exp, "synthetic-xmc-tiny", "full_softmax", 0, out, processed, features,
                         stop_after=1, **change) is None
    assert (out / "checkpoint.pt").exists() and not (out / "metrics.json").exists()
    got = train_changed(exp, "synthetic-xmc-tiny", "full_softmax", 0, out, processed, features, **change)
    assert got["epochs"] == exp["train"]["epochs"]

    from xcbench.tasks.base import task_of
    run = changed(make_run(exp, "synthetic-xmc-tiny", "full_softmax", 0), **change)
    cpu = torch.device("cpu")
    direct = execute(run, task_of(run, entry, str(processed), str(features), cpu), tmp_path / "direct", cpu,
                     FitOptions())
    assert got["metrics"] == direct["metrics"]
    assert json.loads((out / "metrics.json").read_text())["metrics"] == got["metrics"]  # a rerun reads it
    assert train_changed(exp, "synthetic-xmc-tiny", "full_softmax", 0, out, processed, features, **change) == got
