"""Training loop: determinism, interrupt-and-resume, divergence errors, result files."""

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import train_run

from xcbench.checkpoint import StopAfter
from xcbench.config import normalise_methods
from xcbench.io import read_json
from xcbench.step import TrainingDiverged
from xcbench.tasks.base import make_task

DEV = torch.device("cpu")


def _run(tiny_xmc, exp, out, signal_at=None, **kw):
    """One tiny run; `signal_at` (epoch, batch, signum): the task sends that signal there (_signal_at)."""
    processed, feats, entry = tiny_xmc
    exp["methods"] = normalise_methods(exp["methods"])
    task = make_task(exp, entry, processed, feats, DEV, 0)
    if signal_at:
        _signal_at(task, *signal_at)
    return train_run(exp, task, "synthetic-xmc-tiny", next(iter(exp["methods"])), 0, out, DEV, **kw)


def test_same_seed_twice_gives_identical_metrics(tiny_xmc, tiny_exp, tmp_path):
    a = _run(tiny_xmc, tiny_exp, tmp_path / "a")
    b = _run(tiny_xmc, tiny_exp, tmp_path / "b")
    assert a["metrics"] == b["metrics"] and a["curves"] == b["curves"]
    assert read_json(tmp_path / "a" / "metrics.json")["metrics"] == read_json(tmp_path / "b" / "metrics.json")["metrics"]
    for f in ("metrics.json", "history.csv", "config.resolved.yaml"):
        assert (tmp_path / "a" / f).exists()
    assert not (tmp_path / "a" / "checkpoint.pt").exists()
    assert a["metrics"]["P@1"] > 0.2  # it learns (popular-label guessing gives far less on this data)


def test_interrupted_run_resumes_to_identical_metrics(tiny_xmc, tiny_exp, tmp_path):
    full = _run(tiny_xmc, tiny_exp, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "cut", interrupt_after=2)
    assert (tmp_path / "cut" / "checkpoint.pt").exists() and not (tmp_path / "cut" / "metrics.json").exists()
    resumed = _run(tiny_xmc, tiny_exp, tmp_path / "cut")
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]


def test_finish_ends_a_cut_run_at_its_checkpoint(tiny_xmc, tiny_exp, tmp_path):
    """`xcbench train --finish` (FitOptions.finish): a run cut after epoch 2 of 3 is tested as it stands."""
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "cut", interrupt_after=2)
    m = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut", finish=True)
    assert m["epochs"] == 2 and m["cut_short_after_epoch"] == 2 and len(m["curves"]["val_P@1"]) == 2
    # its checkpoint stays: the same run without --finish goes on to the uninterrupted run's numbers, then drops it
    assert (tmp_path / "cut" / "checkpoint.pt").exists()
    cut_rows = (tmp_path / "cut" / "history.csv").read_text().splitlines()  # epochs 0-2 with their measured times
    full = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "full")
    went_on = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut")
    assert went_on["metrics"] == full["metrics"] and went_on["curves"] == full["curves"]
    assert "cut_short_after_epoch" not in read_json(tmp_path / "cut" / "metrics.json")
    assert (tmp_path / "cut" / "history.csv").read_text().splitlines()[:3] == cut_rows  # went on, not trained again
    assert not (tmp_path / "cut" / "checkpoint.pt").exists()
    with pytest.raises(FileNotFoundError, match="no"):
        _run(tiny_xmc, tiny_exp, tmp_path / "never_started", finish=True)


def test_stop_after_pauses_a_run_that_finish_tests_or_a_rerun_continues(tiny_xmc, tiny_exp, tmp_path):
    """`xcbench train --stop-after N` (FitOptions.stop_after): a budgeted run (e.g. one epoch of 30) stops after epoch N with
    its checkpoint; asked again it trains nothing; `--finish` tests it as a cut run; then without either flag it goes
    on to the uninterrupted run's numbers (the flag is not part of the run spec)."""
    full = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "full")
    for _ in range(2):  # the second call resumes at epoch 1 and stops before training
        with pytest.raises(StopAfter, match="stopped after epoch 1 of 3"):
            _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut", stop_after=1)
        assert (tmp_path / "cut" / "checkpoint.pt").exists() and not (tmp_path / "cut" / "metrics.json").exists()
        assert torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)["epoch"] == 1
    m = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut", finish=True)
    assert m["epochs"] == 1 and m["cut_short_after_epoch"] == 1
    resumed = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut")
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]


def test_different_seed_differs(tiny_xmc, tiny_exp, tmp_path):
    processed, feats, entry = tiny_xmc
    tiny_exp["methods"] = normalise_methods(tiny_exp["methods"])
    task = make_task(tiny_exp, entry, processed, feats, DEV, 0)
    a = train_run(tiny_exp, task, "synthetic-xmc-tiny", "full_softmax", 0, tmp_path / "s0", DEV)
    b = train_run(tiny_exp, task, "synthetic-xmc-tiny", "full_softmax", 1, tmp_path / "s1", DEV)
    assert a["curves"]["train_loss"] != b["curves"]["train_loss"]


def test_nan_loss_stops_with_clear_error(tiny_xmc, tiny_exp, tmp_path):
    tiny_exp["train"]["lr"] = float("inf")
    with pytest.raises(TrainingDiverged, match=r"epoch \d+, step \d+.*lower train.lr"):
        _run(tiny_xmc, tiny_exp, tmp_path / "nan")
    assert not (tmp_path / "nan" / "metrics.json").exists()


def test_train_draws_names_the_loss_generators_device(tiny_xmc, tiny_exp, tmp_path):
    """`train.draws: device` on a CPU run is the CPU generator (identical metrics); an unknown value is an
    error naming the key; a checkpoint's generator state that does not fit says which setting to resume with."""
    from test_interfaces import _sampled

    from xcbench.checkpoint import set_generator_state

    exp = _sampled(tiny_exp, "unigram")
    exp["train"]["epochs"] = 1
    a = _run(tiny_xmc, copy.deepcopy(exp), tmp_path / "cpu")
    exp["train"]["draws"] = "device"
    assert _run(tiny_xmc, copy.deepcopy(exp), tmp_path / "device")["metrics"] == a["metrics"]
    exp["train"]["draws"] = "gpu"
    with pytest.raises(ValueError, match=r"train.draws must be one of \('cpu', 'device'\)"):
        _run(tiny_xmc, exp, tmp_path / "bad")
    with pytest.raises(ValueError, match="resume with the `train.draws` and device it was saved with"):
        set_generator_state(torch.Generator(), torch.zeros(16, dtype=torch.uint8), tmp_path / "checkpoint.pt")


def test_cuda_graph_asks_for_a_gpu_device_draws_and_a_capturable_head(tiny_xmc, tiny_exp, tmp_path):
    from xcbench.config import ConfigError
    from xcbench.graphs import check

    tiny_exp["train"]["cuda_graph"] = True
    with pytest.raises(ConfigError, match="train.cuda_graph needs a CUDA device"):
        _run(tiny_xmc, tiny_exp, tmp_path / "g")
    head = type("H", (), {"graph_safe": True})()
    with pytest.raises(ConfigError, match="needs train.draws: device"):
        check({"cuda_graph": True}, torch.device("cuda"), head)
    with pytest.raises(ConfigError, match="cannot be captured"):
        check({"cuda_graph": True, "draws": "device"}, torch.device("cuda"), type("S", (), {})())
    assert check({"cuda_graph": True, "draws": "device"}, torch.device("cuda"), head)
    assert not check({}, torch.device("cuda"), head)


def test_metrics_json_records_time_memory_versions(tiny_xmc, tiny_exp, tmp_path):
    m = _run(tiny_xmc, tiny_exp, tmp_path / "r")
    assert m["wall_time_s"] > 0 and m["time_per_epoch_s"] > 0 and m["epochs"] == 3
    mem = m["memory"]
    assert mem["analytic_bytes"] == mem["param_bytes"] + mem["grad_bytes"] + mem["optimizer_state_bytes"]
    assert mem["optimizer_state_bytes"] >= 2 * mem["grad_bytes"]  # Adam: two moments per weight
    assert mem["peak_rss_bytes"] > 0
    assert m["versions"]["torch"] == torch.__version__ and m["device"] == "cpu"
    assert m["versions"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert len(m["curves"]["val_P@1"]) == 3


def _cli_train(tiny_xmc, tmp_path, out, experiment):
    processed, feats, _ = tiny_xmc
    return [sys.executable, "-m", "xcbench", "train", "--experiment", str(experiment), "--scale", "tiny",
            "--dataset", "synthetic-xmc-tiny", "--method", "full_softmax", "--seed", "0",
            "--processed", str(processed), "--features", str(feats), "--device", "cpu", "--out", str(out)]


def _slow_experiment(tmp_path):
    from conftest import TINY_EXP

    from xcbench.io import write_yaml

    exp = {k: v for k, v in TINY_EXP.items() if k != "scale"}
    exp["train"] = {**exp["train"], "epochs": 12, "batch_size": 8}  # about 1 s an epoch: the kill lands long before the end
    write_yaml(tmp_path / "exp.yaml", exp)
    return tmp_path / "exp.yaml"


@pytest.mark.slow
def test_cli_killed_mid_run_resumes_to_same_metrics(tiny_xmc, tmp_path):
    """SIGKILL the training process once a checkpoint exists, rerun it, compare with a clean run."""
    exp = _slow_experiment(tmp_path)
    proc = subprocess.Popen(_cli_train(tiny_xmc, tmp_path, tmp_path / "killed", exp), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ckpt = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ckpt.exists(), "no checkpoint appeared"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed" / "metrics.json").exists(), "the run finished before it could be killed"
    subprocess.run(_cli_train(tiny_xmc, tmp_path, tmp_path / "killed", exp), check=True, capture_output=True)
    subprocess.run(_cli_train(tiny_xmc, tmp_path, tmp_path / "clean", exp), check=True, capture_output=True)
    a = json.loads((tmp_path / "killed" / "metrics.json").read_text())
    b = json.loads((tmp_path / "clean" / "metrics.json").read_text())
    assert a["metrics"] == b["metrics"] and a["curves"] == b["curves"]
    assert not any(p.name.startswith(".") for p in (tmp_path / "killed").iterdir())


def test_cli_sigterm_checkpoints_and_exits_143(tiny_xmc, tmp_path):
    """The job process itself (not pytest's thread) installs the handler: SIGTERM once the first epoch's
    checkpoint exists gives status 143 and a checkpoint of the run, the result not written (the resumed
    run's numbers: test_sigterm_checkpoints_after_the_current_batch_and_the_rerun_ends_identical)."""
    exp = _slow_experiment(tmp_path)
    proc = subprocess.Popen(_cli_train(tiny_xmc, tmp_path, tmp_path / "t", exp), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    ckpt, deadline = tmp_path / "t" / "checkpoint.pt", time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 143, err[-2000:]
    assert torch.load(ckpt, weights_only=True)["epoch"] >= 1 and not (tmp_path / "t" / "metrics.json").exists()


def test_cli_unknown_method_is_a_clear_error(tiny_xmc, tmp_path):
    exp = _slow_experiment(tmp_path)
    cmd = _cli_train(tiny_xmc, tmp_path, tmp_path / "x", exp)
    cmd[cmd.index("full_softmax")] = "no_such_method"
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 1 and "no_such_method" in r.stderr and "full_softmax" in r.stderr


def test_cli_train_logs_one_line_per_epoch_and_where_results_went(tiny_xmc, tmp_path):
    """Without a TTY (a DAG job's log) every epoch still leaves a line: epoch, loss, validation
    metrics, s/epoch, ETA; the last line names the result file."""
    from xcbench.io import write_yaml
    processed, feats, _ = tiny_xmc
    exp = {"paper": "p", "artifact": "a", "title": "t", "task": {"name": "xmc", "params": {"val_frac": 0.1}},
           "datasets": ["synthetic-xmc-tiny"], "seeds": [0], "methods": {"full_softmax": {}},
           "model": {"encoder": {"name": "mlp", "hidden": 16}},
           "render": {"kind": "table", "renderer": "metric_table"}, "train": {"epochs": 2, "batch_size": 32, "lr": 0.01}}
    write_yaml(tmp_path / "a.yaml", exp)
    out = tmp_path / "anywhere"  # the log names the run, not the folder it writes to
    r = subprocess.run([sys.executable, "-m", "xcbench", "train", "--experiment", str(tmp_path / "a.yaml"), "--scale",
                        "tiny", "--dataset", "synthetic-xmc-tiny", "--method", "full_softmax", "--processed",
                        str(processed), "--features", str(feats), "--threads", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stderr.splitlines() if "synthetic-xmc-tiny/full_softmax epoch" in line]
    assert len(lines) == 2 and "epoch 2/2" in lines[1] and "val_P@1=" in lines[1] and "ETA" in lines[1]
    assert f"results: {out / 'metrics.json'}" in r.stdout.splitlines()[-1]


def test_a_job_log_holds_xcbench_lines_and_no_other_librarys_info_lines():
    """The CLI's logging: xcbench's progress at INFO, other libraries' INFO (fontTools' glyph subsetting
    under matplotlib's PDF backend) left out, their warnings kept."""
    code = ("import logging; from xcbench.cli import configure_logging; configure_logging(); "
            "logging.getLogger('fontTools.subset').info('NOISE'); logging.getLogger('fontTools').warning('WARNED'); "
            "logging.getLogger('xcbench.train').info('EPOCH')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "EPOCH" in r.stderr and "WARNED" in r.stderr and "NOISE" not in r.stderr, r.stderr


def test_a_job_process_trains_without_importing_dynamo():
    """configure_process marks the optimizer bookkeeping as not compiled, so a LazyAdam job never
    imports torch._dynamo (1.5 s of CPU per process); train_step's optimizer_step keeps it out of a job
    using torch's own Adam too (its import was 2.4 of a tiny Adam job's 2.5-s first epoch here, and
    208 ms of its 210-ms recorded step time). The steps are unchanged (test below)."""
    code = ("import sys, torch\n"
            "from xcbench.runtime import configure_process, optimizer_step\n"
            "configure_process(1)\n"
            "from xcbench.optim.lazy_adam import LazyAdam\n"
            "m = torch.nn.Linear(4, 3); o = LazyAdam(m.parameters(), lr=0.1)\n"
            "m(torch.ones(2, 4)).sum().backward(); o.step(); o.zero_grad(); o.load_state_dict(o.state_dict())\n"
            "a = torch.optim.Adam(m.parameters(), lr=0.1)\n"
            "m(torch.ones(2, 4)).sum().backward(); optimizer_step(a); a.zero_grad()\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("make", [lambda p: torch.optim.Adam(p, lr=0.05, weight_decay=0.01),
                                  lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                                  lambda p: torch.optim.AdamW(p, lr=0.05, amsgrad=True)])
@pytest.mark.parametrize("hooked", [False, True])
def test_optimizer_step_equals_torchs_step(make, hooked):
    """runtime.optimizer_step (torch's step body under no_grad, skipping the wrapper that imports
    torch._dynamo) gives the parameters and optimizer state of `opt.step()`, bit for bit; with a step
    hook registered it goes through `opt.step()`, and the hook runs."""
    from xcbench.runtime import optimizer_step

    def run(step):
        g = torch.Generator().manual_seed(0)
        lin = torch.nn.Linear(6, 4)
        with torch.no_grad():
            for p in lin.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        opt, calls = make(lin.parameters()), []
        if hooked:
            opt.register_step_post_hook(lambda o, a, k: calls.append(1))
        for _ in range(4):
            opt.zero_grad()
            lin(torch.randn(8, 6, generator=g)).pow(2).mean().backward()
            step(opt)
        return [p.detach().clone() for p in lin.parameters()], opt.state_dict()["state"], calls

    (w1, s1, c1), (w2, s2, c2) = run(lambda o: o.step()), run(optimizer_step)
    assert all(torch.equal(a, b) for a, b in zip(w1, w2))
    assert all(torch.equal(s1[i][k], s2[i][k]) for i in s1 for k in s1[i])
    assert c1 == c2 == ([1] * 4 if hooked else [])


def test_run_cut_inside_an_epoch_resumes_to_identical_metrics(tiny_xmc, tiny_exp, tmp_path):
    """checkpoint_minutes = 0 (any positive interval elapsed): a checkpoint after every batch of a
    resumable head; cut after 40% of epoch 2, the resumed run redraws epoch 2's order, skips the done
    batches and ends where the uninterrupted run does; --finish there records the fraction."""
    every = {"checkpoint_minutes": 1e-9}
    full = _run(tiny_xmc, tiny_exp, tmp_path / "full", **every)
    with pytest.raises(KeyboardInterrupt, match="in epoch 2"):
        _run(tiny_xmc, tiny_exp, tmp_path / "cut", interrupt_after=1.4, **every)
    ck = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert ck["epoch"] == 1 and ck["step"] > 0
    resumed = _run(tiny_xmc, tiny_exp, tmp_path / "cut", **every)
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, tiny_exp, tmp_path / "fin", interrupt_after=1.4, **every)
    m = _run(tiny_xmc, tiny_exp, tmp_path / "fin", finish=True, **every)
    assert 1 < m["cut_short_after_epoch"] < 2 and m["epochs"] == 1


def test_status_reads_where_each_checkpointed_run_stands(tiny_xmc, tiny_exp, tmp_path):
    """`xcbench status`: a run cut inside epoch 2 shows 1/3 epochs plus its batches, the time left as two more
    epochs at the first's time less what the second already took; a finished run only counts."""
    from xcbench.status import run_status, status

    root = tmp_path / "results" / "tiny"
    every = {"checkpoint_minutes": 1e-9}
    cut = root / "test" / "unit" / "synthetic-xmc-tiny" / "full_softmax" / "seed0"
    with pytest.raises(KeyboardInterrupt):
        _run(tiny_xmc, copy.deepcopy(tiny_exp), cut, interrupt_after=1.4, **every)
    _run(tiny_xmc, copy.deepcopy(tiny_exp), root / "test" / "unit" / "synthetic-xmc-tiny" / "other" / "seed0")
    ck = torch.load(cut / "checkpoint.pt", weights_only=True)
    r = run_status(cut / "checkpoint.pt", root)
    assert (r["epoch"], r["epochs"], r["state"]) == (1, 3, "in progress") and r["step"] == ck["step"] > 0
    t_in = ck["partial"][3]
    assert r["left_h"] == pytest.approx((2 * ck["elapsed"] - t_in) / 3600)
    assert r["trained_h"] == pytest.approx((ck["elapsed"] + t_in) / 3600)
    assert r["val"]["P@1"] == ck["history"][-1]["val_P@1"]
    text = status(tmp_path / "results", "tiny")
    assert text.startswith(f"{root}: 1 runs finished, 1 with a checkpoint")
    assert f"| test/unit/synthetic-xmc-tiny/full_softmax/seed0 | in progress | 1/3 + {ck['step']:,} batches |" in text
    with pytest.raises(FileNotFoundError, match="no such results folder"):
        status(tmp_path / "results", "paper")


def test_status_counts_a_plateau_runs_epochs_without_a_gain(tmp_path):
    """Under a plateau schedule the row says how many epochs validation has not gained, of the stop_patience the
    spec sets (Plateau's default 4 where it sets none), and its time left is an upper bound; another schedule has
    no such count."""
    from xcbench.status import run_status, status_table

    def ckpt(name, train, sched):
        folder = tmp_path / "paper" / "p" / "a" / "d" / name / "seed0"
        folder.mkdir(parents=True)
        torch.save({"epoch": 5, "elapsed": 500.0, "history": [{"epoch": 5, "val_ppl": 150.0}], "stopped": False,
                    "spec": {"train": {"epochs": 20, **train}}, "schedule": sched}, folder / "checkpoint.pt")
        return run_status(folder / "checkpoint.pt", tmp_path)

    set_p = ckpt("set", {"schedule": "plateau", "plateau": {"stop_patience": 10}}, {"lr": 5.0, "best": 149.0, "bad": 3, "bad_lr": 1})
    default_p = ckpt("default", {"schedule": "plateau"}, {"lr": 5.0, "best": 149.0, "bad": 2, "bad_lr": 0})
    cosine = ckpt("cosine", {"schedule": "cosine"}, {})
    assert (set_p["stop"], default_p["stop"], cosine["stop"]) == ((3, 10), (2, 4), None)
    table = status_table([set_p, cosine])
    assert "| 3 of 10 | 0.14 | 0.42 at most |" in table and "| ppl 150 | - | 0.14 | 0.42 |" in table


def test_status_counts_early_stoppings_epochs_without_a_gain_and_takes_the_nearer_rule(tmp_path):
    """`select.patience` stops a run too: the row counts BestEpoch's `bad` against it; where a plateau rule applies as
    well the one nearer to stopping is shown, and a rule that cannot fire before the last epoch is not shown."""
    from xcbench.status import run_status

    def ckpt(name, train, **state):
        folder = tmp_path / "paper" / "p" / "a" / "d" / name / "seed0"
        folder.mkdir(parents=True)
        torch.save({"epoch": 5, "elapsed": 500.0, "history": [{"epoch": 5, "val_ppl": 150.0}], "stopped": False,
                    "spec": {"train": {"epochs": 20, **train}}, **state}, folder / "checkpoint.pt")
        return run_status(folder / "checkpoint.pt", tmp_path)["stop"]

    sel = {"metric": "ppl", "mode": "min"}
    best = {"best": 149.0, "best_epoch": 1, "state": None}
    assert ckpt("select", {"select": {**sel, "patience": 10}}, select={**best, "bad": 4}) == (4, 10)
    assert ckpt("never", {"select": {**sel, "patience": 40}}, select={**best, "bad": 4}) is None   # 36 > 15 owed
    assert ckpt("unbounded", {"select": sel}, select={**best, "bad": 4}) is None
    both = {"select": {**sel, "patience": 5}, "schedule": "plateau", "plateau": {"stop_patience": 10}}
    plateau = {"lr": 5.0, "best": 149.0, "bad": 3, "bad_lr": 1}
    assert ckpt("both", both, select={**best, "bad": 1}, schedule=plateau) == (1, 5)          # 4 left against 7
    assert ckpt("both2", both, select={**best, "bad": 0}, schedule={**plateau, "bad": 8}) == (8, 10)   # 2 against 5


def test_status_names_the_python_training_each_run_not_its_shell(tmp_path):
    """training_pids reads /proc: the `python -m xcbench train` process's --out joined to its working folder; the
    shell around it (one argument holding the command), other programs and unreadable entries are left out."""
    from xcbench.status import training_pids

    proc, work = tmp_path / "proc", tmp_path / "work"
    work.mkdir()

    def fake(pid, argv, cwd=work):
        d = proc / str(pid)
        d.mkdir(parents=True)
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        if cwd is not None:
            (d / "cwd").symlink_to(cwd)
    train = ["-m", "xcbench", "train", "--experiment", "e.yaml", "--out", "results/paper/p/a/d/m/seed0"]
    fake(10, ["/usr/bin/python3.11"] + train)
    fake(11, ["/usr/bin/bash", "-c", "python " + " ".join(train)])
    fake(12, ["/usr/bin/python3"] + train[:3] + ["--out", str(tmp_path / "abs")])
    fake(13, ["/usr/bin/python3", "-m", "xcbench", "render", "--out", "x"])
    fake(14, ["/usr/bin/python3"] + train, cwd=None)
    fake(15, ["/usr/bin/time", "/usr/bin/python3"] + train)  # a wrapper: its python child is the one to signal
    assert training_pids(proc) == {(work / "results/paper/p/a/d/m/seed0").resolve(): 10, (tmp_path / "abs").resolve(): 12}


def _signal_at(task, epoch: int, batch: int, signum: int):
    """Make `task` send `signum` to this process while it hands out `batch` (0-based, at least 1: the probe batch
    of `Task.probe_batch` reads batch 0 of its own pass) of `epoch` (1-based)."""
    real, reached = task.train_batches, []

    def batches(*a, **kw):
        for b, item in enumerate(real(*a, **kw), start=kw.get("start", 0)):
            if b == batch:
                reached.append(1)
                if len(reached) == epoch:
                    os.kill(os.getpid(), signum)
            yield item
    task.train_batches = batches


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_sigterm_checkpoints_after_the_current_batch_and_the_rerun_ends_identical(tiny_xmc, tiny_exp, tmp_path,
                                                                                  monkeypatch, capsys):
    """SIGTERM inside epoch 2 (no timed checkpoints): a checkpoint after that batch, exit status 143, and the
    same command resumes there to the uninterrupted run's numbers; SIGUSR1 saves the same way and goes on."""
    full = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "full")
    with pytest.raises(SystemExit) as e:
        _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut", signal_at=(2, 1, signal.SIGTERM))
    assert e.value.code == 143
    ck = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=True)
    assert (ck["epoch"], ck["step"]) == (1, 2)  # the batch in hand was trained, then saved
    assert "SIGTERM: checkpointed in epoch 2 after batch 2/" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are the caller's again
    resumed = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "cut")
    assert resumed["metrics"] == full["metrics"] and resumed["curves"] == full["curves"]

    from xcbench import train
    saves, real_save = [], train.torch_save
    monkeypatch.setattr(train, "torch_save", lambda path, obj: saves.append((obj["epoch"], obj.get("step"))) or
                        real_save(path, obj))
    went_on = _run(tiny_xmc, copy.deepcopy(tiny_exp), tmp_path / "usr1", signal_at=(2, 1, signal.SIGUSR1))
    assert (1, 2) in saves and went_on["metrics"] == full["metrics"]
    assert "SIGUSR1: checkpointed in epoch 2 after batch 2/" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_a_head_saving_only_at_epoch_ends_exits_at_sigterm_and_ignores_sigusr1(capsys):
    """Outside the batches, or for a head that cannot save between them, SIGTERM ends the process as it
    would without the handler (the last checkpoint stands); SIGUSR1 says when the next checkpoint comes."""
    from xcbench.checkpoint import Signals

    with Signals(mid_epoch=False) as sig:
        sig.armed = True
        os.kill(os.getpid(), signal.SIGUSR1)
        assert sig.asked is None and "epoch ends only" in capsys.readouterr().err
        with pytest.raises(SystemExit) as e:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs in this thread before the sleep ends
        assert e.value.code == 143
    with Signals(mid_epoch=True) as sig:
        with pytest.raises(SystemExit):  # not between batches (an index build, the evaluation)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        sig.armed = True
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert sig.asked == signal.SIGTERM  # not downgraded by the later SIGUSR1
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_only_heads_without_hooks_resume_inside_an_epoch():
    """`resumes_mid_epoch` promises no state outside the parameters, buffers and generators: a head that overrides a
    hook and says so has a test resuming it inside an epoch to the uninterrupted run's numbers (below)."""
    from xcbench.heads.base import Head
    from xcbench.registry import HEADS

    tested_inside = {"selective_softmax"}  # tests/test_selective.py::test_selective_run_resumes_to_identical_metrics
    marked = [n for n in HEADS.names() if HEADS.get(n).resumes_mid_epoch]
    assert "full_softmax" in marked and "selective_softmax" in marked
    for n in marked:
        c = HEADS.get(n)
        assert n in tested_inside or (c.on_epoch_start is Head.on_epoch_start and c.after_step is Head.after_step), n


def test_long_epochs_log_their_progress_where_no_bar_shows(tiny_xmc, tiny_exp, tmp_path, monkeypatch, caplog):
    """Where tqdm is silent (a log file, a DAG job: not a terminal), an epoch logs the batch it reached,
    the rate and its ETA every PROGRESS_S seconds (here every batch); records.progress counts from the
    epoch's first batch (a resumed epoch's rate is not divided by the batches it skipped)."""
    import logging

    from xcbench import records

    monkeypatch.setattr(records, "PROGRESS_S", 0.0)
    tiny_exp["train"]["epochs"] = 1
    with caplog.at_level(logging.INFO, logger="xcbench.train"):
        _run(tiny_xmc, tiny_exp, tmp_path / "a")
    lines = [r.getMessage() for r in caplog.records if ": batch " in r.getMessage()]
    assert lines and all("epoch 1: batch" in m and "s/batch, epoch ETA" in m for m in lines)
    done = [re.search(r"batch (\d+)/(\d+)", m).groups() for m in lines]
    assert [int(k) for k, _ in done] == list(range(1, int(done[0][1])))                  # batches done, all but the last
    caplog.clear()
    tick = records.progress("x/y", 3, 100, first=40, every_s=0.0)
    with caplog.at_level(logging.INFO, logger="xcbench.train"):
        tick(40), tick(90)
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["x/y epoch 3: batch 90/100 (90%)"]


@pytest.mark.parametrize("preset", [None, "3"])
def test_train_runs_numpys_blas_on_one_thread_unless_told(preset, monkeypatch, capsys, tmp_path):
    """`xcbench train` sets OPENBLAS_NUM_THREADS=1 before numpy loads (a job's own process), keeping a value
    the environment gives; here a run that fails at its method name still shows the setting."""
    from xcbench import cli

    if preset is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset)
    rc = cli.main(["train", "--experiment", "config/experiments/class_selection/fig2.yaml", "--scale", "tiny",
                   "--dataset", "synthetic-faces-tiny", "--method", "no_such_method", "--processed", "none.npz", "--out", str(tmp_path)])
    assert rc == 1 and "no_such_method" in capsys.readouterr().err
    assert os.environ["OPENBLAS_NUM_THREADS"] == (preset or "1")


def test_a_train_job_builds_its_run_once(tiny_xmc, tmp_path, monkeypatch):
    """`xcbench train` derives the run's settings once (run.make_run over runspec.method_config) and hands the
    one Run to the task, the loop and the records; its CLI options reach `fit` as FitOptions, not as settings."""
    from conftest import TINY_EXP

    from xcbench import cli, run, train
    from xcbench.io import write_yaml

    write_yaml(tmp_path / "exp.yaml", {k: v for k, v in TINY_EXP.items() if k != "scale"})
    calls = {"make_run": 0, "method_config": 0}

    def counted(name, real):
        def wrapper(*a, **kw):
            calls[name] += 1
            return real(*a, **kw)
        return wrapper

    monkeypatch.setattr(run, "make_run", counted("make_run", run.make_run))
    monkeypatch.setattr(run, "method_config", counted("method_config", run.method_config))
    seen = {}
    real_fit = train.fit
    monkeypatch.setattr(train, "fit", lambda *a, **kw: seen.setdefault("options", a[6]) and real_fit(*a, **kw))
    processed, feats, _ = tiny_xmc
    rc = cli.main(["train", "--experiment", str(tmp_path / "exp.yaml"), "--scale", "tiny", "--dataset", "synthetic-xmc-tiny",
                   "--method", "full_softmax", "--processed", str(processed), "--features", str(feats), "--device", "cpu",
                   "--out", str(tmp_path / "out"), "--checkpoint-minutes", "7"])
    assert rc == 0 and (tmp_path / "out" / "metrics.json").exists()
    assert calls == {"make_run": 1, "method_config": 1}
    assert seen["options"] == train.FitOptions(checkpoint_minutes=7.0)
    resolved = (tmp_path / "out" / "config.resolved.yaml").read_text()
    assert "checkpoint_minutes" not in resolved  # how the job ran is not a setting of the run
    import hashlib
    import json
    digest = {k: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for k, p in (("processed", processed), ("features", feats))}
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["inputs"] == digest  # the files it trained on


@pytest.mark.parametrize("preset", [None, "3"])
def test_features_run_numpys_blas_on_the_threads_they_are_given(preset, monkeypatch, tiny_xmc, tmp_path):
    """`xcbench features --threads k` sets OPENBLAS_NUM_THREADS=k before numpy loads, over the environment's: the
    SVD's sums, so the features' last bits, differ between one BLAS thread and several (synthetic-xmc-10k: two
    digests on a 2-core machine), and the DAG's rule asks for 1 whatever the machine's cores."""
    from xcbench import cli

    if preset is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset)
    processed, _, _ = tiny_xmc
    rc = cli.main(["features", "--dataset", "synthetic-xmc-tiny", "--processed", str(processed), "--extractor", "tfidf_svd",
                   "--dim", "8", "--threads", "1", "--out", str(tmp_path / "f.pt")])
    assert rc == 0 and (tmp_path / "f.pt").exists()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"


def test_graphed_step_warms_up_captures_once_copies_each_batch_in_and_runs_other_shapes_eagerly(monkeypatch):
    """graphs.GraphedStep's bookkeeping with CUDA's graph and stream calls stood in for (a fake graph whose replay
    reads the captured inputs): 2 eager warm-up steps, one capture, then each batch copied into the captured inputs
    before its replay; a batch of another shape runs eagerly; reset captures again. The equality of a captured run
    with an eager one is tests/test_cuda.py's (on a GPU)."""
    import contextlib

    from xcbench import graphs

    seen, gs = [], None

    class FakeGraph:
        def register_generator_state(self, g):
            pass

        def replay(self):
            seen.append(("replay", gs.inputs[0].clone()))

    class FakeStream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph", lambda g: contextlib.nullcontext())

    def step(x, y, idx):
        seen.append(("eager", x.clone()))
        return x.sum()

    gs = graphs.GraphedStep(step)
    batches = [torch.full((2, 3), float(i)) for i in range(6)] + [torch.full((1, 3), 9.0)]
    for x in batches:
        gs(x, x, None)
    kinds = [k for k, _ in seen]
    assert kinds == ["eager", "eager", "eager", "replay", "replay", "replay", "replay", "eager"]  # 3rd: the capture
    assert [float(v[0, 0]) for k, v in seen if k == "replay"] == [2.0, 3.0, 4.0, 5.0]
    assert gs.captures == 1 and gs.replays == 4
    gs.reset()
    gs(batches[0], batches[0], None)
    assert seen[-1][0] == "eager" and gs.graph is None


def test_adam_on_sparse_row_gradients_names_the_fix():
    """torch's Adam refuses the sparse row gradients of HSM, NCE and selective heads; the error names the optimisers
    that take them (an experiment file's fix), not torch's SparseAdam."""
    import torch.nn.functional as F

    from xcbench.config import ConfigError
    from xcbench.runtime import optimizer_step

    W = torch.nn.Parameter(torch.randn(5, 3))
    F.embedding(torch.tensor([1, 3]), W, sparse=True).sum().backward()
    with pytest.raises(ConfigError, match="optimizer: lazy_adam"):
        optimizer_step(torch.optim.Adam([W]))
    optimizer_step(torch.optim.SGD([W], lr=0.1))  # SGD takes them


def test_peak_above_the_mark_counts_only_what_the_job_touched_after_it():
    """runtime.mark_rss resets the kernel's peak resident set: a 300 MiB block touched and freed before the mark is
    not counted, a 64 MiB one touched after it is (in a fresh interpreter: the test process's allocator is tuned).
    Fails when the reset or the starting resident set is dropped."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from xcbench import runtime\n"
        "if not runtime.mark_rss(): print('unavailable'); raise SystemExit\n"
        "big = np.ones(300 << 20, np.uint8); del big\n"
        "assert runtime.mark_rss()\n"
        "x = np.ones(64 << 20, np.uint8)\n"
        "print(runtime.rss_above_mark())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    if out == "unavailable":
        pytest.skip("no /proc/self/clear_refs here")
    assert (64 << 20) - (2 << 20) <= int(out) <= (64 << 20) + (32 << 20)


CORENAME = """
import ctypes, glob, os, sys
import numpy
lib = glob.glob(os.path.join(os.path.dirname(numpy.__file__), "..", "numpy.libs", "*openblas*"))
so = ctypes.CDLL(lib[0]) if lib else None
name = next((n for n in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename")
             if so is not None and hasattr(so, n)), None)
if name is None:
    print("no-openblas")
else:
    f = getattr(so, name); f.restype = ctypes.c_char_p
    print(os.environ.get("OPENBLAS_CORETYPE"), f().decode())
"""


@pytest.mark.parametrize("verb", ["features", "train"])
def test_jobs_pin_numpys_blas_kernels_on_x86_before_numpy_loads(verb, tiny_xmc, tmp_path):
    """A fresh `xcbench features` or `train` process runs numpy's OpenBLAS on its Haswell (AVX2) kernels on any
    x86-64 CPU, unless the environment names others: OpenBLAS picks SkylakeX's on an AVX512 Intel CPU, whose
    sums give other features than the reference tree's. Read back from OpenBLAS after the job ran."""
    import platform
    import subprocess
    import sys

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the kernels are pinned on x86-64 only")
    processed, _, _ = tiny_xmc
    argv = (["features", "--dataset", "synthetic-xmc-tiny", "--processed", str(processed), "--extractor", "tfidf_svd",
             "--dim", "8", "--threads", "1", "--out", str(tmp_path / "f.pt")] if verb == "features" else
            ["train", "--experiment", "config/experiments/class_selection/fig2.yaml", "--scale", "tiny", "--dataset",
             "synthetic-faces-tiny", "--method", "no_such_method", "--processed", "none.npz", "--out", str(tmp_path)])
    probe = f"from xcbench import cli\ncli.main({argv!r})\n" + CORENAME
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS") and k != "XCBENCH_FORKSERVER"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    if out.strip().endswith("no-openblas"):
        pytest.skip("numpy here is not linked to OpenBLAS")
    assert out.split()[-2:] == ["Haswell", "Haswell"]
    env["OPENBLAS_CORETYPE"] = "Sandybridge"   # the environment's choice wins
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["Sandybridge", "Sandybridge"]
