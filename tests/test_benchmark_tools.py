"""The GPU session's report tools against hand-made inputs: device_parity's comparison of two run trees and
midx_seed_curves' reading of training logs."""

import json
from pathlib import Path

import pytest
from conftest import load_benchmark as _load


def _run(root, dev, key, rc, metrics=None):
    d = root / dev / key
    d.mkdir(parents=True)
    (d / "parity_run.json").write_text(json.dumps({"rc": rc, "wall_s": 1.0, "tail": "" if rc == 0 else "boom\nValueError: bad"}))
    if metrics is not None:
        (d / "metrics.json").write_text(json.dumps({"metrics": metrics, "git_commit": "abcdef0123"}))


def test_device_parity_compares_test_metrics_and_leaves_timings_and_failures_apart(tmp_path):
    dp = _load("device_parity")
    for dev in ("cpu", "cuda"):
        (tmp_path / dev).mkdir()
        (tmp_path / dev / "meta.json").write_text(json.dumps({"device": dev.upper(), "torch": "x"}))
    _run(tmp_path, "cpu", "results/tiny/p/a/d/same/seed0", 0, {"P@1": 0.5, "build_s": 0.01, "nested": {"R@3": [0.2, 0.4]}})
    _run(tmp_path, "cuda", "results/tiny/p/a/d/same/seed0", 0, {"P@1": 0.5, "build_s": 0.3, "nested": {"R@3": [0.2, 0.4]}})
    _run(tmp_path, "cpu", "results/tiny/p/a/d/moved/seed0", 0, {"ppl": 40.0, "acc": 0.2})
    _run(tmp_path, "cuda", "results/tiny/p/a/d/moved/seed0", 0, {"ppl": 50.0, "acc": 0.2})
    _run(tmp_path, "cpu", "results/tiny/p/a/d/broken/seed0", 0, {"ppl": 1.0})
    _run(tmp_path, "cuda", "results/tiny/p/a/d/broken/seed0", 1)
    rows, meta = dp.compare(tmp_path)
    by = {r["run"].split("/")[-2]: r for r in rows}
    assert meta["cuda"]["device"] == "CUDA"
    assert by["same"]["max_rel_diff"] == 0.0 and by["same"]["metrics"] == 3      # build_s (a time) left out
    assert by["moved"]["worst"] == "ppl" and by["moved"]["max_rel_diff"] == pytest.approx(10 / 50)
    assert by["broken"]["cuda_rc"] == 1 and "ValueError: bad" in by["broken"]["error"]
    assert dp.leaves({"a": {"b": [1, 2.5]}, "c": True, "d": "x"}) == {"a.b[0]": 1.0, "a.b[1]": 2.5}


def test_device_parity_compares_two_named_trees_and_counts_the_exact_matches(tmp_path, monkeypatch):
    """`compare --sides before after`: two CPU sweeps of the code before and after a change."""
    dp = _load("device_parity")
    monkeypatch.setattr(dp, "OUT", tmp_path / "out")
    for side in ("before", "after"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "meta.json").write_text(json.dumps({"device": "EPYC", "torch": "x"}))
    _run(tmp_path, "before", "results/tiny/p/a/d/same/seed0", 0, {"ppl": 40.0})
    _run(tmp_path, "after", "results/tiny/p/a/d/same/seed0", 0, {"ppl": 40.0})
    _run(tmp_path, "before", "results/tiny/p/a/d/close/seed0", 0, {"ppl": 40.0})
    _run(tmp_path, "after", "results/tiny/p/a/d/close/seed0", 0, {"ppl": 40.000001})
    rows, meta = dp.compare(tmp_path, "before", "after")
    dp.render(rows, "t", {"scale": "tiny", **meta}, "before", "after", note="A note.")
    md = (tmp_path / "out" / "t.md").read_text()
    assert md.startswith("# before vs after") and "| before | after |" in md
    assert "Same test metrics (largest relative difference <= 0.0001): 2; exactly equal: 1. " in md and "A note." in md


def test_seed_curves_read_validation_perplexity_from_a_training_log(tmp_path):
    sc = _load("midx_seed_curves", "studies/midx_table4")
    log = tmp_path / "run.log"
    log.write_text("resuming ...\n"
                   "04:29:14 ptb/lstm_midx_pq epoch 1/100 loss=1.228 val_ppl=442 val_nll=6.091 13.4 s/epoch ETA 22m02s\n"
                   "Traceback (most recent call last):\n"
                   "04:29:24 ptb/lstm_midx_pq epoch 2/100 loss=2.13 val_ppl=250.1 val_nll=5.522 9.7 s/epoch\n")
    name, curve, about = sc.from_log(log, "seed 1, H200")
    assert curve == {1: 442.0, 2: 250.1} and name.startswith("lstm_midx_pq (seed 1, H200)")
    (tmp_path / "empty.log").write_text("nothing here\n")
    with pytest.raises(SystemExit, match="no per-epoch lines"):
        sc.from_log(tmp_path / "empty.log")


def test_train_concurrency_speedup_is_k_runs_throughput_over_one_runs():
    """k = 1 at 20 ms a step: 50 steps/s; k = 2 at 30 ms each: 66.7 steps/s in all, 1.33x; k = 4 at 80 ms: 1.00x.
    Chained (one sync at the end): k = 1 at 10 ms, k = 2 at 10 ms: 2.00x; k = 4 at 20 ms: 2.00x."""
    import argparse

    tc = _load("train_concurrency")
    a = argparse.Namespace(method="m", experiment="e.yaml", scale="paper", dataset="d", steps=10, draws="device")
    rows = [{"k": k, "step_ms_median": ms, "step_ms_min": ms, "step_ms_max": ms, "chained_ms_median": c, "wall_s": 1.0,
             "device": "G", "torch": "t"} for k, ms, c in ((1, 20.0, 10.0), (2, 30.0, 10.0), (4, 80.0, 20.0))]
    body = [ln.split(" | ") for ln in tc.table(rows, a).splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [(r[0], r[3], r[4], r[6], r[7]) for r in body] == [
        ("| 1", "50", "1.00", "100", "1.00"), ("| 2", "67", "1.33", "200", "2.00"), ("| 4", "50", "1.00", "200", "2.00")]


def test_paper_cost_plan_counts_kept_and_cut_runs_and_what_they_still_owe(tmp_path):
    """A run cut after 4 of its 10 epochs owes the epochs after its checkpoint in the work tree (whichever
    attempt made it), else its whole measured projection; a canonical train_step file wins over a named
    variant; a run measured nowhere is counted as unmeasured."""
    import json as _json

    import torch

    paper_cost = _load("paper_cost")
    run = tmp_path / "rff" / "fig3" / "ptb" / "exp" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(_json.dumps({"cut_short_after_epoch": 4, "device_name": "cpu"}))
    rec = {"paper": "rff", "artifact": "fig3", "method": "exp", "dataset": "ptb", "gpu": False, "epochs": 10,
           "run_h": 2.0, "step_ms": 300.0}
    records = [{**rec, "source": "train_step_rff_fig3_paper.json"},
               {**rec, "run_h": 99.0, "step_ms": 1.0, "source": "train_step_rff_fig3_paper_old_loop.json"}]
    work = tmp_path / "work"
    ckpt = work / "rff" / "fig3" / "ptb" / "exp" / "seed0" / "checkpoint.pt"
    ckpt.parent.mkdir(parents=True)

    def plan():
        return {(r["artifact"], r["method"]): r for r in paper_cost.plan(tmp_path, records, work) if r["paper"] == "rff"}

    assert abs(plan()[("fig3", "exp")]["cpu"]["left_h"] - 2.0) < 1e-9  # no checkpoint: trained again from the start
    ckpt.write_bytes(b"")
    assert abs(plan()[("fig3", "exp")]["cpu"]["left_h"] - 2.0) < 1e-9  # unreadable: the same
    torch.save({"epoch": 2, "model": {}}, ckpt)
    assert abs(plan()[("fig3", "exp")]["cpu"]["left_h"] - 1.6) < 1e-9  # a new attempt's checkpoint after epoch 2
    torch.save({"epoch": 4, "model": {}}, ckpt)
    rows = plan()
    exp = rows[("fig3", "exp")]
    assert exp["kept_epochs"] == 4 and exp["cpu"]["step_ms"] == 300.0 and abs(exp["cpu"]["left_h"] - 1.2) < 1e-9
    assert "cpu" not in rows[("fig3", "uniform")] and rows[("fig3", "uniform")]["kept_epochs"] == 0
    assert ("fig3", "full") not in rows  # Figure 2 owns the identical Full run
    md = paper_cost.markdown(list(rows.values()))
    assert "| rff | fig3 | 3 | 0 | 1 | 2 | 1.20 (1) | - | 2 |" in md
    assert "1 has one, else its whole run" in md and "from scratch, over the runs measured: 2.00 CPU-hours (1 runs)" in md


def test_paper_cost_compares_kept_runs_own_steps_with_their_records():
    """The plan's error bar: each kept run's own step over its record's of the same kind (a GPU run against the GPU
    record), summarised as median, middle half and range; runs without a step or a record of their kind are left out."""
    paper_cost = _load("paper_cost")

    def row(method, kept, kind, cpu=None, gpu=None):
        return {"paper": "p", "artifact": "a", "method": method, "kept_step_ms": kept, "kept_kind": kind,
                **({"cpu": {"step_ms": cpu}} if cpu else {}), **({"gpu": {"step_ms": gpu}} if gpu else {})}
    rows = [row("x", 200.0, "cpu", cpu=100.0), row("y", 50.0, "cpu", cpu=100.0), row("z", 30.0, "gpu", cpu=1.0, gpu=10.0),
            row("w", 100.0, "cpu", cpu=100.0), row("v", None, "cpu", cpu=100.0), row("u", 5.0, "gpu", cpu=5.0)]
    text = " ".join(paper_cost.accuracy_section(rows))
    assert "Over the 4 kept runs" in text and "range 0.50-3.00x" in text and "median 1.50x" in text
    assert "Farthest: p/a z 3.00x (30 against 10 ms); p/a x 2.00x" in text
    # a selector rebuilt inside its steps: the record's step with its builds spread over them (300 / 150: 2x, not 3x)
    hf = {**row("s", 300.0, "cpu"), "cpu": {"step_ms": 100.0, "step_with_builds_ms": 150.0}}
    assert "p/a s 2.00x (300 against 150 ms)" in " ".join(paper_cost.accuracy_section([hf]))
    assert paper_cost.accuracy_section([row("v", None, "cpu", cpu=1.0)]) == []


def test_paper_cost_gives_a_learning_rate_grid_point_its_methods_step_rate(tmp_path):
    """`full.lr0.003` of xcbench/seqrec_lr has no train_step record of its own: it takes the record of the method it is a
    grid point of (its own record first where one exists); a method measured nowhere stays unmeasured. (A grid point
    at the lr the table runs its method at, Full's 1e-3 or Uniform's and NCE's 3e-4, is the table's run and counted there.)"""
    paper_cost = _load("paper_cost")
    rec = {"paper": "xcbench", "artifact": "seqrec", "dataset": "seqrec-sports", "gpu": False, "epochs": 50,
           "source": "train_step_xcbench_seqrec_paper.json"}
    records = [{**rec, "method": "full", "run_h": 5.0, "step_ms": 20.0},
               {**rec, "artifact": "seqrec_lr", "method": "nce.lr0.001", "run_h": 1.0, "step_ms": 4.0,
                "source": "train_step_xcbench_seqrec_lr_paper.json"}]
    rows = {(r["artifact"], r["method"]): r for r in paper_cost.plan(tmp_path, records) if r["paper"] == "xcbench"}
    for lr in ("0.0003", "0.003"):
        assert rows[("seqrec_lr", f"full.lr{lr}")]["cpu"]["step_ms"] == 20.0
    assert all(("seqrec_lr", m) not in rows for m in ("full.lr0.001", "uniform.lr0.0003", "nce.lr0.0003"))
    assert rows[("seqrec_lr", "nce.lr0.001")]["cpu"]["step_ms"] == 4.0
    assert "cpu" not in rows[("seqrec_lr", "nce.lr0.003")]  # nce itself is measured nowhere
    assert "cpu" not in rows[("seqrec_lr", "hf.lr0.003")]
    # a selector rebuilt every 100 of 200 steps an epoch, 3 s a build: its step as training sees it is 30 ms longer
    records.append({**rec, "method": "hf", "run_h": 1.0, "step_ms": 10.0, "builds_per_epoch": 2.0,
                    "index_build_s": 3.0, "batches_per_epoch": 200})
    rows = {(r["artifact"], r["method"]): r for r in paper_cost.plan(tmp_path, records) if r["paper"] == "xcbench"}
    assert rows[("seqrec", "hf")]["cpu"]["step_with_builds_ms"] == 40.0
    assert rows[("seqrec", "full")]["cpu"]["step_with_builds_ms"] == 20.0


def test_paper_cost_borrows_another_artifacts_step_rate_only_for_a_run_stepping_the_same(tmp_path):
    """MIDX table4_adam extends table4 with batch 256 (table4: 20): table4's lstm_full record is not its rate,
    while table4's own run takes it."""
    paper_cost = _load("paper_cost")
    rec = {"paper": "midx", "artifact": "table4", "dataset": "ptb", "gpu": False, "epochs": 100, "method": "lstm_full",
           "run_h": 2.9, "step_ms": 75.0, "source": "train_step_midx_table4_paper.json"}
    rows = {(r["artifact"], r["method"]): r for r in paper_cost.plan(tmp_path, [rec])
            if r["paper"] == "midx" and r["dataset"] == "ptb"}
    assert rows[("table4", "lstm_full")]["cpu"]["step_ms"] == 75.0
    assert "cpu" not in rows[("table4_adam", "lstm_full")]


def test_paper_cost_marks_a_shape_proxys_rate_and_lends_it_only_at_the_same_feature_width(tmp_path):
    """A record measured on a shape proxy (train_step --epoch-rows) is rendered as such; sparse table1's record on
    Wiki10-31K (512-d tf-idf features) is not table1_cascade's rate (768-d label-SVD features), though both
    experiments' methods share head, model, batch and optimizer."""
    paper_cost = _load("paper_cost")
    rec = {"paper": "sparse", "artifact": "table1", "dataset": "wiki10-31k", "gpu": False, "epochs": 100,
           "method": "uniform", "run_h": 0.56, "step_ms": 48.0, "source": "train_step_sparse_table1_paper_wiki10-31k.json",
           "shape_proxy": {"train": 12731, "val": 1415, "proxy_train": 2160, "proxy_val": 240}}
    rows = {(r["artifact"], r["method"]): r for r in paper_cost.plan(tmp_path, [rec])
            if r["paper"] == "sparse" and r["dataset"] == "wiki10-31k"}
    assert rows["table1", "uniform"]["cpu"]["proxy"] is True
    assert "cpu" not in rows["table1_cascade", "uniform"]
    assert "| sparse/table1 | wiki10-31k | uniform | 100 (0) | 48 (shape proxy) |" in paper_cost.markdown(list(rows.values()))


def test_shape_proxy_rows_carry_the_real_sets_labels_per_point(tmp_path, catalogue):
    """synthetic-xmc keeps a row's distinct labels, fewer than it draws: the proxy's generator setting is solved
    so that the closed-form mean is Wiki10-31K's 18.64, and rows drawn by the generator at that setting carry it
    (to sampling error; at the uncorrected setting they carry 16.96)."""
    from xcbench.data.datasets import load_npz, prepare
    from xcbench.data.synthetic import generate

    sp = _load("shape_proxy")
    entry = catalogue["wiki10-31k"]
    proxy = sp.proxy_entry(entry, rows=600)
    assert proxy["params"]["n_labels"] == 30938 and proxy["params"]["n_train"] == 600
    assert sp.expected_labels(proxy["params"]["avg_labels"], 30938) == pytest.approx(18.64, abs=1e-3)
    generate(proxy, tmp_path / "raw")
    prepare(proxy, tmp_path / "raw", tmp_path / "d.npz")
    arrays, _ = load_npz(tmp_path / "d.npz")
    Y = arrays["train_Y"]
    assert Y.shape == (600, 30938)
    assert Y.nnz / Y.shape[0] == pytest.approx(18.64, abs=0.6)  # standard error of the mean: about 0.18


def test_train_step_projects_a_shape_proxys_epoch_over_the_real_rows(tiny_xmc, tiny_exp, monkeypatch):
    """--epoch-rows: the real set's rows split as the task splits them; the epoch takes ceil(train / B) batches and
    the evaluation scales with the validation rows (each clock reading 1 s later than the last: every timed
    interval is 1 s)."""
    import itertools

    import torch

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    ts = _load("train_step")
    processed, feats, entry = tiny_xmc
    tiny_exp["methods"] = normalise_methods(tiny_exp["methods"])
    task = make_task(tiny_exp, entry, processed, feats, torch.device("cpu"), 0)
    rows = ts.proxy_rows(task, 10_000)
    assert rows == {"train": 9_000, "val": 1_000, "proxy_train": task.info["n_train"], "proxy_val": task.info["n_val"]}
    clock = itertools.count()
    monkeypatch.setattr(ts.time, "perf_counter", lambda: float(next(clock)))
    r = ts.one(tiny_exp, task, "synthetic-xmc-tiny", "full_softmax", torch.device("cpu"), 2, rows=rows)
    bs = int(tiny_exp["train"]["batch_size"])
    assert r["batches_per_epoch"] == -(-9_000 // bs) != task.n_train_batches(bs)
    assert r["eval_s"] == pytest.approx(1_000 / task.info["n_val"])


def test_seqrec_shape_proxy_has_the_real_sets_items_and_mean_length_and_projects_by_users(tmp_path, catalogue,
                                                                                           monkeypatch):
    """A seqrec proxy: the real set's items (every one occurring), every user of the real mean length, enough
    users for five batches of windows; the real set is F = users / proxy users copies of it, so train_step's epoch
    takes F times the proxy's windows and validation queries."""
    import itertools

    import numpy as np
    import torch

    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.data.datasets import load_npz
    from xcbench.tasks.base import make_task

    sp, ts = _load("shape_proxy"), _load("train_step")
    monkeypatch.setitem(sp.SEQ_SIZES, "gowalla", (1_000, 300, 25_000))  # L = 25: 21 training items, 1 window each
    assert sp.seq_windows(25, 20) == 1 and sp.seq_windows(62, 20) == 3  # split_points(62) = (50, 56): 49 positions
    processed, F = sp.seq_proxy(catalogue["gowalla"], batch=16, max_len=20, data=tmp_path)
    arrays, meta = load_npz(processed)
    lengths = np.diff(arrays["seq_indptr"])
    assert meta["n_users"] == 80 and F == pytest.approx(1_000 / 80)              # 5 batches of 16 windows
    assert (lengths == 25).all() and np.unique(arrays["seq_items"]).size == 300
    exp = resolve_experiment(load_experiment(Path(__file__).parents[1] / "config/experiments/midx/table7.yaml"), "tiny")
    exp["train"]["batch_size"] = 16
    task = make_task(exp, catalogue["gowalla"], str(processed), None, torch.device("cpu"), 0, dataset="gowalla")
    rows = ts.proxy_rows(task, scale=F)
    assert rows["proxy_train"] == 80 and rows["proxy_val"] == 80 * 2            # round(25 / 10) = 2 held out
    assert rows["train"] == round(80 * F) == 1_000 and rows["val"] == round(rows["proxy_val"] * F)
    clock = itertools.count()  # every timed interval 1 s
    monkeypatch.setattr(ts.time, "perf_counter", lambda: float(next(clock)))
    r = ts.one(exp, task, "gowalla", "sas_full", torch.device("cpu"), 1, rows=rows)
    assert r["batches_per_epoch"] == 1_000 // 16 + 1 and r["eval_s"] == pytest.approx(F)


def test_train_step_times_a_sampled_head_by_the_logits_route_asked_for(tiny_xmc, tiny_exp):
    """--logits: the step is built with the route asked for (read back from the head), the experiment itself is
    left as it was, and None keeps the experiment's own route."""
    import torch

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    built, ts = _load("built"), _load("train_step")
    processed, feats, entry = tiny_xmc
    tiny_exp["methods"] = normalise_methods({"uniform": {"head": "sampled_softmax", "params": {"m": 5}}})
    task = make_task(tiny_exp, entry, processed, feats, torch.device("cpu"), 0)
    for route in ("sparse", "all", None):
        exp = ts.with_logits(tiny_exp, "uniform", route)
        model = built.build(exp, task, "synthetic-xmc-tiny", "uniform", torch.device("cpu"))[2]
        assert model.head.logits == (route or "gather")
    assert "logits" not in tiny_exp["methods"]["uniform"]["params"]


def test_train_step_merge_keeps_the_rows_of_the_methods_not_measured_now(tmp_path):
    """--merge (shape_proxy.py passes it): an earlier file's rows survive for the methods measured apart, and a
    method measured again loses its old row."""
    ts = _load("train_step")
    path = tmp_path / "t.json"
    assert ts.kept_rows(path, {"rff"}) == []
    path.write_text(json.dumps([{"method": "exp", "step_ms": 1.0}, {"method": "rff", "step_ms": 9.0}]))
    assert ts.kept_rows(path, {"rff"}) == [{"method": "exp", "step_ms": 1.0}]


def test_paper_cost_says_why_a_run_has_no_step_rate_and_how_to_measure_it(tmp_path):
    """Without records every run is unmeasured: a measurement job (MIDX Fig. 7b) has no command; a generated set
    and a manual download are named as such, with train_step's command for the experiment and its features; a
    grid point of xmc_lr is measured through xmc, whose methods it steps as."""
    paper_cost = _load("paper_cost")
    rows = paper_cost.plan(tmp_path, [])
    why = {(r["paper"], r["artifact"], r["dataset"]): r["to_measure"] for r in rows}
    assert why["midx", "fig7b", "synthetic-sphere-10k"] == {
        "why": "a measurement job, nothing trained: its cost is its own wall time", "command": None}
    gen = why["xcbench", "xmc", "synthetic-xmc-1m"]
    assert gen["why"] == "data generated here"
    assert gen["command"].startswith("python benchmarks/train_step.py --experiment config/experiments/xcbench/xmc.yaml ")
    assert "--features data/features/synthetic-xmc-1m/tfidf_svd256.pt" in gen["command"]
    assert why["sparse", "table1", "amazon-670k"]["why"].startswith("data by manual download (https://")
    assert why["sparse", "table1", "amazon-670k"]["command"].startswith(
        "python benchmarks/shape_proxy.py amazon-670k --experiments config/experiments/sparse/table1.yaml` (no data")
    assert why["rff", "fig3", "ptb"]["why"] == "data downloaded from its URL (the mirror first)"
    assert why["midx", "table7", "gowalla"]["command"].startswith(  # a fetched log: measurable before the download
        "python benchmarks/shape_proxy.py gowalla --experiments config/experiments/midx/table7.yaml` (no data")
    assert why["midx", "table7_lr", "gowalla"]["command"].startswith(
        "python benchmarks/shape_proxy.py gowalla --experiments config/experiments/midx/table7.yaml`")
    assert "--experiment config/experiments/xcbench/xmc.yaml " in why["xcbench", "xmc_lr", "synthetic-xmc-1m"]["command"]
    md = paper_cost.markdown(rows)
    assert "| midx/fig7b | synthetic-sphere-10k | 7 | a measurement job" in md


def test_paper_cost_projects_each_run_over_its_own_epochs(tmp_path):
    """Class selection Figure 2 trains 30 epochs, its WikiText-2 column 40 (`per_dataset`): a run's epochs and its
    projection are its own merged train config's, not the experiment's top level."""
    paper_cost = _load("paper_cost")
    rec = {"paper": "class_selection", "artifact": "fig2", "method": "full", "gpu": False, "epochs": 40, "run_h": 20.0,
           "step_ms": 500.0, "source": "train_step_class_selection_fig2_paper.json"}
    records = [{**rec, "dataset": "wikitext-2"}, {**rec, "dataset": "synthetic-faces-87k", "epochs": 30, "run_h": 30.0}]
    rows = {(r["dataset"], r["method"]): r for r in paper_cost.plan(tmp_path, records)
            if (r["paper"], r["artifact"]) == ("class_selection", "fig2") and r["seed"] == 0}
    assert rows["wikitext-2", "full"]["epochs"] == 40 and rows["wikitext-2", "full"]["cpu"]["run_h"] == 20.0
    assert rows["synthetic-faces-87k", "full"]["epochs"] == 30 and rows["synthetic-faces-87k", "full"]["cpu"]["run_h"] == 30.0


def test_paper_cost_bounds_runs_a_plateau_rule_stops_by_where_kept_ones_stopped(tmp_path):
    """MIDX Figure 7(a) trains at most 100 epochs under a plateau rule that stops it (stop_patience 10): a kept run
    that ended at epoch 40 without being cut stopped early there (a cut one did not); the owed runs' hours are
    an upper bound, put beside that paper's median stopping fraction; a paper with none kept gets no fraction."""
    import json as _json

    paper_cost = _load("paper_cost")
    run = tmp_path / "midx" / "fig7a" / "ptb"
    for key, rec in (("uniform_m5", {"epochs": 40}), ("uniform_m10", {"epochs": 60}),
                     ("uniform_m50", {"epochs": 30, "cut_short_after_epoch": 30})):
        (run / key / "seed0").mkdir(parents=True)
        (run / key / "seed0" / "metrics.json").write_text(_json.dumps(rec))
    records = [{"paper": "midx", "artifact": "fig7a", "method": m, "dataset": "ptb", "gpu": False, "epochs": 100,
                "run_h": 2.0, "step_ms": 50.0, "source": "train_step_midx_fig7a_paper.json"}
               for m in ("uniform_m50", "uniform_m100")]
    rows = {r["method"]: r for r in paper_cost.plan(tmp_path, records, tmp_path / "none")
            if (r["paper"], r["artifact"]) == ("midx", "fig7a")}
    assert rows["uniform_m5"]["stop_rule"] and rows["uniform_m5"]["stopped_at"] == 40
    assert rows["uniform_m10"]["stopped_at"] == 60 and rows["uniform_m50"]["stopped_at"] is None
    text = paper_cost.early_stop_note([r for r in rows.values()])
    # owed: uniform_m50 (cut after 30, no checkpoint: 2 h) and uniform_m100 (2 h); the rest measured nowhere
    assert "midx, 26 runs, 4.00 CPU-h; 2 of its kept runs under the rule stopped at a median 50% of their epochs " \
           "(40%-60%), near 2.00 CPU-h at each artifact's own median" in text
    # another artifact's runs stop later (Table 7: 40 of 50): its owed 10 h go at its own 80%, not the paper's 60%
    t7_kept = {**rows["uniform_m5"], "artifact": "table7", "stopped_at": 40, "epochs": 50, "kept_epochs": 50}
    t7_owed = {**rows["uniform_m100"], "artifact": "table7", "cpu": {"left_h": 10.0}}
    assert "midx, 27 runs, 14 CPU-h; 3 of its kept runs under the rule stopped at a median 60% of their epochs " \
           "(40%-80%), near 10 CPU-h at each artifact's own median" in paper_cost.early_stop_note(
               [*rows.values(), t7_kept, t7_owed])
    # an artifact with no kept run under the rule takes the paper's median (60%): 10 h -> 6 h
    t9_owed = {**t7_owed, "artifact": "table9"}
    assert "near 8.00 CPU-h at each artifact's own median" in paper_cost.early_stop_note(
        [*rows.values(), {**t7_kept, "artifact": "fig7b"}, t9_owed])
    # a run owed on a GPU record too: both kinds' hours, each scaled
    gpu = {**rows["uniform_m100"], "gpu": {"left_h": 8.0}}
    assert "midx, 26 runs, 4.00 CPU-h and 8.00 GPU-h;" in paper_cost.early_stop_note(
        [gpu if r is rows["uniform_m100"] else r for r in rows.values()])
    other = {**rows["uniform_m100"], "paper": "sparse"}
    assert "sparse, 1 runs, 2.00 CPU-h; none of its runs under the rule is kept yet" in paper_cost.early_stop_note([other])
    assert paper_cost.early_stop_note([{**other, "stop_rule": False}]) == ""


def test_paper_cost_counts_select_patience_as_a_stop_rule(tmp_path):
    """MIDX Table 7 has no plateau schedule but stops a run after 10 epochs without an NDCG@10 gain
    (`select.patience`) within its 50: its kept runs that ended early stopped there and its owed runs' hours are an
    upper bound, as under a plateau's `stop_patience`."""
    import json as _json

    paper_cost = _load("paper_cost")
    run = tmp_path / "midx" / "table7" / "gowalla" / "sas_uniform" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(_json.dumps({"epochs": 20}))
    rows = {r["method"]: r for r in paper_cost.plan(tmp_path, [], tmp_path / "none")
            if (r["paper"], r["artifact"], r["dataset"], r["seed"]) == ("midx", "table7", "gowalla", 0)}
    assert rows["sas_uniform"]["stop_rule"] and rows["sas_uniform"]["stopped_at"] == 20
    assert rows["sas_full"]["stop_rule"] and rows["sas_full"]["stopped_at"] is None


def test_paper_cost_lists_the_runs_each_claim_waits_on(tmp_path):
    """MIDX's seqrec_sas_rq_ge_pq compares SASRec's MIDX-rq and MIDX-pq on each Table 7 dataset: with MIDX-rq kept
    whole on Sports it waits on MIDX-pq alone there, and on both elsewhere; with MIDX-pq kept cut short it still
    waits on it; the sparsest-dataset claim (`across`) is one row over every dataset."""
    import json as _json

    paper_cost = _load("paper_cost")

    def keep(method, epochs):
        run = tmp_path / "midx" / "table7" / "seqrec-sports" / method / "seed0"
        run.mkdir(parents=True, exist_ok=True)
        (run / "metrics.json").write_text(_json.dumps({"device_name": "cpu", **(
            {"cut_short_after_epoch": epochs} if epochs < 50 else {})}))

    def waiting():
        return {(w["claim"], w["dataset"]): sorted(r["method"] for r in w["runs"])
                for w in _load("cost_next").claims_waiting(paper_cost.plan(tmp_path, []))}

    keep("sas_midx_rq", 50)
    got = waiting()
    assert got["seqrec_sas_rq_ge_pq", "seqrec-sports"] == ["sas_midx_pq"]
    assert got["seqrec_sas_rq_ge_pq", "gowalla"] == ["sas_midx_pq", "sas_midx_rq"]
    assert ("seqrec_sas_gain_largest_on_sparsest", "all") in got
    assert not any(c == "seqrec_sas_gain_largest_on_sparsest" and d != "all" for c, d in got)
    keep("sas_midx_pq", 20)
    assert waiting()["seqrec_sas_rq_ge_pq", "seqrec-sports"] == ["sas_midx_pq"]
    keep("sas_midx_pq", 50)
    assert ("seqrec_sas_rq_ge_pq", "seqrec-sports") not in waiting()


def test_paper_cost_does_not_hold_a_claim_on_a_curves_start_for_a_cut_run(tmp_path):
    """SCENT's curves_start_at_log_k reads the validation CE before training and log K: a run kept cut after 4 of
    50 epochs already settles it, while sox_below_bsgd, on final training CE, waits on its cut runs."""
    import json as _json

    paper_cost, cost_next = _load("paper_cost"), _load("cost_next")
    for method in ("scent", "sox", "bsgd", "sgd"):
        run = tmp_path / "scent" / "table_final" / "synthetic-faces-360k" / method / "seed0"
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(_json.dumps({"device_name": "cpu", "cut_short_after_epoch": 4}))
    got = {w["claim"] for w in cost_next.claims_waiting(paper_cost.plan(tmp_path, []))}
    assert "sox_below_bsgd" in got and "scent_below_sox" in got
    assert not {"curves_start_at_log_k_upper", "curves_start_at_log_k_lower"} & got
    assert cost_next.settled_at_start("initial.val_ce") and not cost_next.settled_at_start("final.val_ce")


@pytest.mark.parametrize("batch_first", [False, True])
def test_train_step_counts_the_lstm_products_the_flop_counter_misses(batch_first):
    """torch's FlopCounterMode counts nn.LSTM (mkldnn_rnn_layer on the CPU) as 0 FLOPs, so an LSTM model's
    matmul floor left out its recurrent layers; with train_step's formulas a 2-layer LSTM counts
    3 x 2 x tokens x 4H(I + H) per layer (forward, then twice that backward), by hand here."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    fl = _load("floors")
    T, B, I, H = 5, 3, 6, 4
    lstm = torch.nn.LSTM(I, H, num_layers=2, batch_first=batch_first)
    x = torch.randn((B, T, I) if batch_first else (T, B, I))
    with FlopCounterMode(display=False, custom_mapping=fl.rnn_flop_formulas()) as counter:
        out, _ = lstm(x)
        out.sum().backward()
    per_token = 2 * (4 * H * (I + H) + 4 * H * (H + H))  # forward multiply-adds x 2, both layers
    assert counter.get_total_flops() == 3 * T * B * per_token


def test_train_step_counts_sparse_products_at_their_entries_as_the_gathers():
    """`logits: sparse` (heads/row_dots.py) takes the gather's products: 2 B k d FLOPs for the dots and twice that
    backward. torch's FlopCounterMode priced its CSR x dense products as dense (B x n x d: a floor 3x the gather's
    at PTB) and its sampled product at 0; with train_step's formulas both routes count 6 B k d, by hand here
    (distinct classes in every row, so no pair is merged)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from xcbench.heads.row_dots import RowDots, SampledDots

    fl = _load("floors")
    B, k, d, n = 4, 5, 3, 50
    ids = torch.stack([torch.randperm(n, generator=torch.Generator().manual_seed(b))[:k] for b in range(B)])
    counts = []
    for route in ("gather", "sparse"):
        h, E = torch.randn(B, d, requires_grad=True), torch.randn(n, d, requires_grad=True)
        with FlopCounterMode(display=False, custom_mapping=fl.matmul_flop_formulas()) as counter:
            dots = RowDots.apply(h.unsqueeze(1), E[ids]) if route == "gather" else SampledDots.apply(h, E, ids)
            dots.sum().backward()
        counts.append(counter.get_total_flops())
    assert counts == [6 * B * k * d] * 2


@pytest.mark.parametrize("head", ["sampled_uniform", "sampled_midx_rq", "selective_random"])
def test_loss_layer_measures_a_registry_heads_step_and_the_rows_its_gradient_reaches(head):
    """loss_layer's registry heads at a small n: a finite loss, the index build apart, and the floor the rows the
    step's gradient reaches (the labels and negatives: some, never more than all n)."""
    ll = _load("loss_layer")
    n, d, B = 2000, 16, 8
    r = ll.one_head(head, n, d, B, repeats=1)
    assert r["method"] == head and r["loss"] == r["loss"] and r["step_s"] > 0 and r["build_s"] >= 0
    rows = r["floor_mb_touched"] * 2 ** 20 / (3 * d * 4)
    assert B <= round(rows) < n


def test_reproduce_kept_names_input_files_that_differ():
    """A retrained run that differs from its kept one says whether its input files (metrics.json `inputs`) are other
    files than the kept run read, or that the kept run recorded none: a features file rebuilt on another BLAS thread
    count changes every number without a change of code."""
    rk = _load("reproduce_kept")
    same = {"processed": "aa", "features": "bb"}
    assert rk.inputs_note(same, dict(same)) == ""
    assert rk.inputs_note(same, {"processed": "aa", "features": "cc"}) == \
        " (other input files: features; rebuild them as the kept run's were, then compare)"
    assert "recorded no digests" in rk.inputs_note(None, same)


def test_reproduce_kept_tells_a_loss_sum_rounding_from_another_model():
    """Only the training loss's epoch means moved, by float32's last bits, while every test metric and validation
    curve is equal: 'metrics identical'. A larger move, or any other number, still reads 'differs'."""
    rk = _load("reproduce_kept")
    assert rk.status({}, None, None) == "identical"
    last_bit = {"curves.train_loss": ([5.038398357, 4.914305741763671], [5.038398357, 4.9143057188353625])}
    assert rk.status(last_bit, None, None).startswith("metrics identical")
    assert rk.status({"curves.train_loss": ([5.0, 4.9], [5.0, 4.9001])}, None, None).startswith("differs")
    assert rk.status({**last_bit, "metrics.P@1": (0.5, 0.51)}, None, None).startswith("differs")
    assert rk.status({"curves.val_P@1": ([0.5], [0.5000001])}, None, None).startswith("differs")
    assert rk.status({"curves.train_loss": ([None, 4.9], [None, None])}, None, None).startswith("differs")


def test_train_step_times_the_optimizer_update_alone_and_renders_it_beside_old_records():
    """optimizer_seconds makes `steps` updates of the optimizer on the gradients in place (the weights then equal
    those of as many plain Adam steps), and the table shows '-' for a record made before it was timed."""
    import copy

    import torch

    fl, ts = _load("floors"), _load("train_step")
    p = torch.nn.Parameter(torch.randn(7, 3, generator=torch.Generator().manual_seed(0)))
    p.grad = torch.randn(7, 3, generator=torch.Generator().manual_seed(1))
    q = copy.deepcopy(p)
    q.grad = p.grad.clone()
    opt, ref = torch.optim.Adam([p], lr=0.1), torch.optim.Adam([q], lr=0.1)
    assert fl.optimizer_seconds(opt, 3, torch.device("cpu")) > 0
    for _ in range(3):
        ref.step()
    assert torch.equal(p, q) and not torch.equal(p, q.grad)
    base = {"method": "m", "step_ms": 10.0, "chained_step_ms": 9.0, "data_ms": 0.1, "index_build_s": 0.0,
            "eval_s": 1.0, "batches_per_epoch": 5, "epoch_s": 60.0, "epochs": 2, "run_h": 0.1, "floor_ms": 1.0}
    md = ts.table([{**base, "optimizer_ms": 4.25}, {**base, "method": "old"}], "t")
    assert "| m | cpu | 10.0 | 9.0 | 4.2 | - | 1.0 |" in md and "| old | cpu | 10.0 | 9.0 | - | - | 1.0 |" in md


def test_train_step_projects_an_epoch_with_every_index_rebuild_it_makes():
    """A selector rebuilt every T steps builds batches / T times an epoch (HF-A at its first phase's T), one built
    once for the run 1 / epochs times, and a sampler's index (built at each epoch start) once: the projection of
    Figure 6's T = 100 at 87K identities was short of 85 builds of 20 s an epoch when it counted one."""
    import torch

    from xcbench.registry import HEADS

    ts = _load("train_step")
    g = torch.Generator().manual_seed(0)
    head = lambda name, **p: HEADS.get(name)(8, 50, g, **p)  # noqa: E731
    assert ts.builds_per_epoch(head("selective_softmax", selector_params={"rebuild_every": 7}), 700, 30) == 100
    assert ts.builds_per_epoch(head("selective_softmax", selector_params={"rebuild_every": None}), 700, 30) == 1 / 30
    hfa = {"T_start": 20, "T_end": 200}
    assert ts.builds_per_epoch(head("selective_softmax", selector="hf_a", selector_params=hfa), 700, 30) == 35
    assert ts.builds_per_epoch(head("selective_softmax", selector="random"), 700, 30) == 1
    assert ts.builds_per_epoch(head("sampled_softmax", sampler="midx_pq", sampler_params={"K": 4}), 700, 30) == 1
    base = {"method": "m", "step_ms": 10.0, "data_ms": 0.1, "index_build_s": 2.0, "eval_s": 1.0,
            "batches_per_epoch": 700, "epoch_s": 60.0, "epochs": 30, "run_h": 0.5}
    assert "| 2.00 | 100 | 1.0 | 700 |" in ts.table([{**base, "builds_per_epoch": 100.0}], "t")


def test_train_step_times_its_steps_after_the_warm_up_it_is_given(tiny_xmc, tiny_exp):
    """`one` takes `warmup` untimed steps (at least the one that counts FLOPs), then times `steps`; the record says
    how many of each, with the optimizer's update timed apart."""
    import torch

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    ts = _load("train_step")
    processed, feats, entry = tiny_xmc
    tiny_exp["methods"] = normalise_methods(tiny_exp["methods"])
    task = make_task(tiny_exp, entry, processed, feats, torch.device("cpu"), 0)
    for warmup, seen in ((4, 4), (0, 1)):
        r = ts.one(tiny_exp, task, "synthetic-xmc-tiny", "full_softmax", torch.device("cpu"), 3, evaluate=False,
                   warmup=warmup)
        assert (r["steps_timed"], r["warmup_steps"]) == (3, seen)
        assert r["step_ms"] > 0 and r["optimizer_ms"] > 0 and r["matmul_gflop"] > 0



def test_train_step_projects_an_epoch_with_the_rebuilds_of_a_selector(prepared):
    """A hashing forest rebuilt every 2 steps: the projected epoch counts batches / 2 index builds."""
    import torch

    from xcbench.config import normalise_methods
    from xcbench.tasks.base import make_task

    ts = _load("train_step")
    processed, entry = prepared("synthetic-faces-tiny")
    exp = {"paper": "test", "artifact": "unit", "title": "t", "scale": "tiny",
           "task": {"name": "faces", "params": {"eval_train_size": 100}},
           "render": {"kind": "table", "renderer": "metric_table"}, "datasets": ["synthetic-faces-tiny"], "seeds": [0],
           "methods": normalise_methods({"hf": {"head": "selective_softmax", "params": {
               "selector": "hf", "M_frac": 0.6, "selector_params": {"trees": 2, "leaf": 4, "rebuild_every": 2}}}}),
           "model": {"encoder": {"name": "mlp", "hidden": 8}},
           "train": {"epochs": 3, "batch_size": 32, "lr": 0.01, "optimizer": "lazy_adam"}}
    task = make_task(exp, entry, processed, None, torch.device("cpu"), 0)
    r = ts.one(exp, task, "synthetic-faces-tiny", "hf", torch.device("cpu"), 2, evaluate=False)
    nb = r["batches_per_epoch"]
    assert r["builds_per_epoch"] == nb / 2 and nb > 2
    assert r["epoch_s"] == pytest.approx(nb * (r["step_ms"] + r["data_ms"]) / 1e3 + nb / 2 * r["index_build_s"])
    assert "phases" not in r
    # HF-A: each phase timed at its start with its own trees and T (2 -> 4 trees, T 5 -> 9 over 3 one-epoch phases)
    exp["methods"] = normalise_methods({"hf_a": {"head": "selective_softmax", "params": {
        "selector": "hf_a", "M_frac": 0.6, "selector_params": {"trees_start": 2, "trees_end": 4, "T_start": 5,
                                                                "T_end": 9, "phase_epochs": 1, "leaf": 4}}}})
    r = ts.one(exp, task, "synthetic-faces-tiny", "hf_a", torch.device("cpu"), 2, evaluate=False)
    got = [(p["from_epoch"], p["epochs"], p["trees"], p["T"], p["builds_per_epoch"]) for p in r["phases"]]
    assert got == [(0, 1, 2, 5, nb / 5), (1, 1, 3, 6, nb / 6), (2, 1, 3, 8, nb / 8)]
    assert r["epoch_s"] == pytest.approx(sum(p["epoch_s"] for p in r["phases"]) / 3)
    assert r["run_h"] == pytest.approx(3 * r["epoch_s"] / 3600)


def test_train_step_asks_for_a_gpu_and_a_capturable_head_before_timing_cuda_graphs(tiny_xmc, tiny_exp):
    """--cuda-graph on the CPU, or on a head whose step cannot be captured, is a clear error (main() then leaves the
    method out, saying why), never eager steps timed under the graph's name."""
    import pytest
    import torch

    from xcbench.config import ConfigError, normalise_methods
    from xcbench.tasks.base import make_task

    ts = _load("train_step")
    processed, feats, entry = tiny_xmc
    tiny_exp["methods"] = normalise_methods(tiny_exp["methods"])
    task = make_task(tiny_exp, entry, processed, feats, torch.device("cpu"), 0)
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        ts.one(tiny_exp, task, "synthetic-xmc-tiny", "full_softmax", torch.device("cpu"), 2, evaluate=False,
               cuda_graph=True)


def test_paper_cost_targets_are_the_runs_of_the_cheapest_claims_on_the_kind_asked(monkeypatch):
    """`paper_cost.py --targets N`: the result files owed by the N claims cheapest on the CPU (or GPU), each once,
    cheapest claim first; a claim with a run unmeasured on that kind is not offered."""
    cost_next = _load("cost_next")

    def run(method):
        return {"paper": "p", "artifact": "a", "dataset": "d", "key": method, "seed": 0}
    waiting = [{"claim": "x", "runs": [run("m1"), run("m2")], "cpu_h": 5.0, "gpu_h": 0.1},
               {"claim": "y", "runs": [run("m2")], "cpu_h": 1.0, "gpu_h": None},
               {"claim": "z", "runs": [run("m3")], "cpu_h": None, "gpu_h": 0.05}]
    monkeypatch.setattr(cost_next, "claims_waiting", lambda rows: [dict(w) for w in waiting])
    path = "results/paper/p/a/d/{}/seed0/metrics.json".format
    assert cost_next.next_targets([], 2) == [path("m2"), path("m1")]
    assert cost_next.next_targets([], 1, "gpu") == [path("m3")]
    assert cost_next.next_targets([], 9, "gpu") == [path("m3"), path("m1"), path("m2")]
    assert cost_next.next_targets([], 9) == [path("m2"), path("m1")]
    assert cost_next.next_targets([], 1, has_data=lambda d: d != "d") == []  # every claim waits on d's files


def test_paper_cost_targets_skip_the_claims_whose_data_need_a_manual_download(monkeypatch, tmp_path, capsys):
    """`--targets` offers a claim only where each run's dataset can start here: generated, fetched, or its files in a
    mirror or at a URL; a manual-download set (the XC repository's Drive files) is skipped and named with its page."""
    monkeypatch.delenv("XCBENCH_MIRROR", raising=False)
    has = _load("paper_cost").data_at_hand([str(tmp_path)])
    assert has("synthetic-faces-360k") and has("ptb")  # generated; downloadable
    assert not has("wiki10-31k")
    assert "Wiki10-31K.bow.zip: download it from https://manikvarma" in capsys.readouterr().err
    (tmp_path / "wiki10-31k").mkdir()
    (tmp_path / "wiki10-31k" / "Wiki10-31K.bow.zip").write_bytes(b"zip")
    assert _load("paper_cost").data_at_hand([str(tmp_path)])("wiki10-31k")


def test_reproduce_kept_lists_a_metric_the_kept_run_predates_without_calling_it_a_difference():
    """A number today's code adds (the XMC task's softmax_loss) is listed as added; a kept number that moved or is
    gone still differs."""
    rk = _load("reproduce_kept")
    kept = {"metrics.P@1": 0.5, "curves.val_P@1": [0.4, 0.5]}
    now = {**kept, "metrics.softmax_loss": 6.2, "curves.val_softmax_loss": [7.0, 6.5]}
    assert rk.compare(now, kept) == ({}, ["curves.val_softmax_loss", "metrics.softmax_loss"])
    assert rk.compare({**now, "metrics.P@1": 0.51}, kept)[0] == {"metrics.P@1": (0.5, 0.51)}
    assert rk.compare({"curves.val_P@1": [0.4, 0.5]}, kept)[0] == {"metrics.P@1": (0.5, None)}


def test_step_forms_weights_tell_a_head_that_hands_its_dual_rule_another_lme(prepared, monkeypatch):
    """SCENT's steps in the kept form (the rule computes its own logmeanexp) and the registered one (the head hands
    it its own) end with the same weights once every batch is seen three times; a head that hands its rule another
    lme ends elsewhere."""
    import types

    from conftest import REPO

    import xcbench.heads.minmin as minmin
    from xcbench.optim.duals import logmeanexp

    sf = _load("step_forms")
    processed, _ = prepared("synthetic-faces-tiny")
    a = types.SimpleNamespace(experiment=str(REPO / "config/experiments/scent/table_final.yaml"), scale="tiny",
                              dataset="synthetic-faces-tiny", processed=str(processed), features=None,
                              methods=["scent"], rounds=4, visits=3)

    def identical(rows):
        return {r["form"]: r["identical"] for r in rows if r["part"] == "train step"}

    rows = sf.measure(a)
    assert set(identical(rows).values()) == {True}
    assert {r["form"] for r in rows if r["part"] == "head loss and backward"} == {"nu lme twice", "nu lme once"}
    monkeypatch.setattr(minmin, "logmeanexp", lambda R, mask: logmeanexp(R, mask) * 0.5)
    assert identical(sf.measure(a))["registered"] is False
