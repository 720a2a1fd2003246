"""The paper scale's cost plan: for every artifact, its runs, which are kept in the reference tree (whole
or cut after some epochs), the measured ms a step on a CPU and on a GPU with the projected hours of each
run, and the total still to spend. Nothing is typed: runs come from the experiment files, kept runs from
`reference/paper/results/`, step rates from every `benchmarks/out/train_step_*.json` (written by
benchmarks/train_step.py; its `matmul floor ms` where the record has one). A run's hours scale the
measured projection to the experiment's epochs. A kept run cut after k epochs owes the rest where its
checkpoint is at hand (`results/paper/.../checkpoint.pt` in this work tree: `--resume-from`), else its whole run
(the reference tree keeps no checkpoints). The totals are given twice: what the reference tree still
lacks, and the whole paper scale from scratch (what a user pays to regenerate every measured run). Two lists
order the work: the claims of `config/claims/` waiting on runs, cheapest first (what each costs to check at the
paper's settings), and the runs without a step rate, with why and the command that measures them.

    python benchmarks/paper_cost.py            # -> benchmarks/out/paper_cost.{json,md}
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from pathlib import Path

from common import write_outputs
from cost_next import claims_section, hours, how_to_measure, next_targets, paper_experiments, unmeasured_section

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "out"


def step_records(folder: Path) -> list[dict]:
    """Every train_step record, tagged with its paper, artifact (from the record or its file name) and
    whether a GPU measured it."""
    out = []
    for f in sorted(folder.glob("train_step_*.json")):
        stem = f.stem.removeprefix("train_step_")
        for r in json.loads(f.read_text()):
            paper = r.get("paper") or next((p for p in PAPERS if stem.startswith(p + "_")), None)
            artifact = r.get("artifact") or stem.removeprefix(f"{paper}_").split("_paper")[0]
            gpu = "cuda" in stem or any(k in r.get("device", "") for k in ("NVIDIA", "H100", "H200", "cuda"))
            out.append({**r, "paper": paper, "artifact": artifact, "gpu": gpu, "source": f.name})
    return out


def step_signature(exp: dict, dataset: str, method: str) -> str:
    """What sets a run's step cost: its head and the head's parameters, the model, the fixed features it reads
    (their width: sparse table1_cascade's 768 against table1's 512), the batch size and the optimiser (not its
    learning rate, epochs, schedule or seed)."""
    from xcbench.runspec import method_config

    spec, train, model = method_config(exp, dataset, method)
    return json.dumps([spec.get("head"), spec.get("params"), model, exp.get("features"), train.get("batch_size"),
                       train.get("optimizer")], sort_keys=True, default=str)


def experiment_of(exps: dict, paper: str, artifact: str) -> dict | None:
    """The experiment a step record measured: its artifact, or the longest `_`-prefix of a file-named one that
    is an artifact (`table2_750k` -> class selection's table2); None when none is."""
    parts = artifact.split("_")
    return next((exps[paper, "_".join(parts[:k])] for k in range(len(parts), 0, -1)
                 if (paper, "_".join(parts[:k])) in exps), None)


def best_record(records: list[dict], paper: str, artifact: str, dataset: str, method: str, gpu: bool,
                same_step=None) -> dict | None:
    """The measurement of this run's method on this dataset: its own artifact's before another artifact's of
    the paper with the same method key, which counts only where `same_step(record)` says its step is this
    run's (MIDX table4_adam's batch of 256 steps 13 times the tokens of table4's 20); a file under
    train_step.py's default name (`<paper>_<artifact>_paper`, `_cuda`, `_<dataset>`) before a named variant
    (`_loop`, `_atomic`: a past code path or setting); then the last file in name order."""
    mine = [r for r in records if (r["paper"], r["method"], r.get("dataset"), r["gpu"]) == (paper, method, dataset, gpu)
            and (r["artifact"] == artifact or same_step is None or same_step(r))]
    if not mine:
        return None

    def rank(r: dict) -> tuple:
        base = f"train_step_{r['paper']}_{r['artifact']}_paper"
        canonical = r["source"] in {f"{base}{x}.json" for x in ("", "_cuda", f"_{dataset}", f"_{dataset}_cuda")}
        return (r["artifact"] == artifact, canonical, r["source"])

    return max(mine, key=rank)


def checkpoint_epoch(path: Path | None) -> int | None:
    """The last finished epoch of a run's checkpoint.pt, None where there is none or it cannot be read."""
    if path is None or not path.exists():
        return None
    import torch

    try:
        return int(torch.load(path, weights_only=True, map_location="cpu", mmap=True)["epoch"])  # mmap: no GB read
    except Exception:  # noqa: BLE001 - a damaged or foreign file: the run starts again
        return None


def plan(root: Path, records: list[dict], resume_from: Path | None = None) -> list[dict]:
    from xcbench.catalogue import load_datasets
    from xcbench.reporting.stop_rule import as_today, stop_window, stopped_early_at
    from xcbench.run import expected_runs, run_location, view_runs
    from xcbench.runspec import encoder_config, method_config

    rows, catalogue = [], load_datasets()
    files, resolved = paper_experiments()
    exps = {(e["paper"], e["artifact"]): e for e in resolved}  # what another artifact's step record was measured on
    for f, exp in zip(files, resolved):
        if exp.get("runs_of"):
            continue  # a view: its runs are its owner's
        for d, m, s in sorted(set(expected_runs(exp)) | {r for r in view_runs(f, "paper") if r[1] in exp["methods"]}):
            owner, key = run_location(exp, d, m, s)
            if owner != exp["artifact"]:
                continue  # trained (and counted) by the artifact that owns the identical run
            _, train_cfg, model_cfg = method_config(exp, d, m)
            epochs = int(train_cfg.get("epochs", 1))  # a dataset's or method's own epochs win
            metrics = root / exp["paper"] / owner / d / key / f"seed{s}" / "metrics.json"
            done = json.loads(metrics.read_text()) if metrics.exists() else None
            if done:  # trained past where today's stopping rule ends it: finished there
                done = as_today(done, train_cfg)
            trained = (done.get("cut_short_after_epoch") or epochs) if done else 0
            ckpt = resume_from / exp["paper"] / owner / d / key / f"seed{s}" / "checkpoint.pt" if resume_from else None
            # a rule that can end the run before its last epoch: `select.patience` or the plateau's `stop_patience`
            stops = stop_window(train_cfg) is not None
            row = {"paper": exp["paper"], "artifact": exp["artifact"], "dataset": d, "method": m, "key": key, "seed": s,
                   # a stop rule that can end the run: its hours below are for all its epochs, an upper bound
                   "stop_rule": stops,
                   "stopped_at": stopped_early_at(done, epochs) if stops and done else None,
                   "epochs": epochs, "kept_epochs": min(trained, epochs), "kept_device": (done or {}).get("device_name"),
                   "checkpoint_epoch": checkpoint_epoch(ckpt) if trained < epochs else None,
                   "kept_step_ms": ((done or {}).get("final") or {}).get("step_ms"),  # the kept run's own last-epoch step
                   "kept_kind": "gpu" if (done or {}).get("device", "cpu").startswith("cuda") else "cpu"}
            # an unfinished run continues from its checkpoint (whatever run made it); without one it starts again
            owed = epochs - (row["checkpoint_epoch"] or 0) if trained < epochs else 0
            mine = step_signature(exp, d, m)
            recurrent = "lstm" in str(encoder_config(model_cfg).get("name", ""))

            def same_step(r: dict, d=d, mine=mine) -> bool:  # another artifact's record, of a run stepping as this one
                other = experiment_of(exps, r["paper"], r["artifact"])
                return other is not None and r["method"] in other["methods"] and \
                    step_signature(other, d, r["method"]) == mine
            for kind, gpu in (("cpu", False), ("gpu", True)):
                # a learning-rate grid point (`full.lr0.003`) steps as its method does: the lr changes no cost
                r = best_record(records, exp["paper"], exp["artifact"], d, m, gpu, same_step) or best_record(
                    records, exp["paper"], exp["artifact"], d, exp["methods"][m].get("grid_of", m), gpu, same_step)
                if r:
                    run_h = r["run_h"] * epochs / max(1, int(r["epochs"]))
                    # a record made before train_step counted fused LSTM ops has no floor for an LSTM model (it
                    # counted its recurrent layers as 0 FLOPs)
                    floor = r.get("floor_ms") if r.get("flops_counted") or not recurrent else None
                    # a selector rebuilt every T steps rebuilds inside the training step, whose mean then carries it
                    rebuilt = r.get("builds_per_epoch", 1.0) != 1.0
                    per_step = r["step_ms"] + (1e3 * r["builds_per_epoch"] * r["index_build_s"] / r["batches_per_epoch"]
                                               if rebuilt else 0.0)
                    row[kind] = {"step_ms": r["step_ms"], "step_with_builds_ms": per_step, "floor_ms": floor, "run_h": run_h,
                                 "left_h": run_h * owed / epochs,
                                 "device": r.get("device"), "source": r["source"], "proxy": "shape_proxy" in r}
            if "cpu" not in row and "gpu" not in row:
                row["to_measure"] = how_to_measure(f, exp, d, catalogue)
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    arts: dict[tuple, list[dict]] = {}
    for r in rows:
        arts.setdefault((r["paper"], r["artifact"]), []).append(r)
    lines = ["# Cost plan of the paper scale", "",
             "Per artifact: its own runs (views render other artifacts' runs and are not listed), how many are kept "
             "in `reference/paper` whole or cut short, and the hours the rest still needs from measured step rates "
             "(`benchmarks/out/train_step_*.json`: CPU at the threads named there, GPU on the card named there); "
             "a learning-rate grid point (`full.lr0.003`) takes its method's rate, as the lr changes no step's cost; "
             "a selector's index counts every rebuild (batches / T builds an epoch); HF-A is timed phase by phase where "
             "its record has `phases`, else at its first phase alone, which understates its run (at 87K on the CPU "
             "10.3 h from its first phase against 17.6 h phase by phase, in one measurement, both at M = 1%, while the run "
             "adapts M from its CP_K: 512 from epoch 6 at 87K, where its epoch took 757 s against 1,040 before); "
             "`unmeasured` runs have no step rate yet. Rendered by `python benchmarks/paper_cost.py`.", "",
             "| paper | artifact | runs | kept whole | kept cut | missing | CPU h left (measured runs) | "
             "GPU h left (measured runs) | unmeasured |", "|---|---|---|---|---|---|---|---|---|"]
    tot = {"cpu": 0.0, "gpu": 0.0}
    scratch = {k: [r[k]["run_h"] for r in rows if k in r] for k in ("cpu", "gpu")}
    for (p, a), rs in arts.items():
        whole = sum(r["kept_epochs"] == r["epochs"] for r in rs)
        cut = sum(0 < r["kept_epochs"] < r["epochs"] for r in rs)
        left = {k: [r[k]["left_h"] for r in rs if k in r and r["kept_epochs"] < r["epochs"]] for k in ("cpu", "gpu")}
        unmeasured = sum("cpu" not in r and "gpu" not in r and r["kept_epochs"] < r["epochs"] for r in rs)
        for k in tot:
            tot[k] += sum(left[k])
        cells = [f"{hours(sum(v))} ({len(v)})" if v else "-" for v in (left["cpu"], left["gpu"])]
        lines.append(f"| {p} | {a} | {len(rs)} | {whole} | {cut} | {len(rs) - whole - cut} | {cells[0]} | {cells[1]} | "
                     f"{unmeasured} |")
    resumable = sum(r["checkpoint_epoch"] is not None for r in rows)
    lines += ["", f"Measured runs still to train: {hours(tot['cpu'])} CPU-hours or {hours(tot['gpu'])} GPU-hours "
              "(each total over the runs measured on that kind of machine; an unfinished run owes the epochs after "
              f"its checkpoint in this work tree, {resumable} {'has' if resumable == 1 else 'have'} one, else its whole "
              "run, even where the reference tree keeps it cut short). The whole paper scale from scratch, over the runs "
              f"measured: {hours(sum(scratch['cpu']))} CPU-hours ({len(scratch['cpu'])} runs) or "
              f"{hours(sum(scratch['gpu']))} GPU-hours ({len(scratch['gpu'])} runs).{early_stop_note(rows)}", "",
              "## Runs with a measured step rate", "",
              "matmul floor: the step's matrix-product FLOPs at the device's measured product rate (train_step.py); "
              "`-` for an LSTM model measured before train_step counted the fused recurrent ops (torch's FlopCounterMode "
              "counts them as 0: such a floor left out the LSTM, e.g. 34 GFLOP a step at MIDX table4_adam's batch). "
              "`(shape proxy)`: measured on a synthetic set of the real one's shape, where the real set is not on this "
              "machine (benchmarks/shape_proxy.py: XMC, its label count, labels per point and feature width, the epoch "
              "projected over its training rows; sequential recommendation, its items and mean sequence length, the "
              "epoch projected over its users).", "",
              "| artifact | dataset | method | epochs (kept) | CPU ms / step | matmul floor ms | CPU h | GPU ms / step | GPU h |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "cpu" not in r and "gpu" not in r:
            continue
        c, g = r.get("cpu", {}), r.get("gpu", {})
        proxy = lambda k: " (shape proxy)" if k.get("proxy") else ""  # noqa: E731
        lines.append(f"| {r['paper']}/{r['artifact']} | {r['dataset']} | {r['method']} | {r['epochs']} ({r['kept_epochs']}) | "
                     f"{hours(c.get('step_ms'))}{proxy(c)} | {hours(c.get('floor_ms'))} | {hours(c.get('run_h'))} | "
                     f"{hours(g.get('step_ms'))}{proxy(g)} | {hours(g.get('run_h'))} |")
    lines += accuracy_section(rows)
    lines += claims_section(rows)
    lines += unmeasured_section(rows)
    return "\n".join(lines) + "\n"


def early_stop_note(rows: list[dict]) -> str:
    """The owed runs that a stop rule (`select.patience`, a plateau's `stop_patience`) may end before their last
    epoch, projected above at all their epochs (an upper bound), per paper beside where that paper's kept runs
    under such a rule stopped, and their hours at the median stopping fraction of their own artifact's kept runs
    (the paper's where the artifact has none: Table 7's runs stop later than Figure 7(a)'s)."""
    def median_stop(runs: list[dict]) -> float | None:
        f = [r["stopped_at"] / r["epochs"] for r in runs if r["stopped_at"]]
        return statistics.median(f) if f else None

    def hrs(h: dict) -> str:
        return " and ".join(f"{hours(v)} {k.upper()}-h" for k, v in h.items() if v)

    parts = []
    for paper in sorted({r["paper"] for r in rows if r["stop_rule"]}):
        mine = [r for r in rows if r["paper"] == paper and r["stop_rule"]]
        owed = [r for r in mine if r["kept_epochs"] < r["epochs"]]
        if not owed:
            continue
        left = {k: sum(r[k]["left_h"] for r in owed if k in r) for k in ("cpu", "gpu")}
        fracs = sorted(r["stopped_at"] / r["epochs"] for r in mine if r["stopped_at"])
        seen = "; none of its runs under the rule is kept yet"
        if fracs:
            median = statistics.median(fracs)
            own = {a: median_stop([r for r in mine if r["artifact"] == a]) or median for a in {r["artifact"] for r in owed}}
            at = {k: sum(r[k]["left_h"] * own[r["artifact"]] for r in owed if k in r) for k in ("cpu", "gpu")}
            seen = (f"; {len(fracs)} of its kept runs under the rule stopped at a median {median:.0%} "
                    f"of their epochs ({fracs[0]:.0%}-{fracs[-1]:.0%}), near {hrs(at)} at each artifact's own median "
                    "(the paper's where an artifact has none kept)")
        parts.append(f"{paper}, {len(owed)} runs, {hrs(left)}{seen}")
    if not parts:
        return ""
    return (" Runs under a rule that can stop them (`select.patience` or a plateau's `stop_patience`) are projected "
            "at all their epochs, an upper bound (a run stops where its own validation curve flattens, so a fraction "
            "from other runs is an estimate): "
            + "; ".join(parts) + ".")


def accuracy_section(rows: list[dict]) -> list[str]:
    """How far the plan's step rates are from the kept runs' own: per kept run with a record of its kind (CPU or
    GPU), its last epoch's mean step (metrics.json `final.step_ms`, trained beside other runs) over the record's.
    Both are wall clocks on a shared machine, so this is the plan's error bar, not a verdict on either."""
    step = lambda c: c.get("step_with_builds_ms", c["step_ms"])  # noqa: E731
    pairs = [(r, r["kept_step_ms"] / step(r[r["kept_kind"]])) for r in rows
             if r.get("kept_step_ms") and r["kept_kind"] in r and r[r["kept_kind"]]["step_ms"]]
    if not pairs:
        return []
    q = sorted(x for _, x in pairs)
    quart = statistics.quantiles(q, n=4) if len(q) > 1 else [q[0]] * 3
    far = sorted(pairs, key=lambda p: -abs(math.log(p[1])))[:5]
    return ["", "## The step rates against the kept runs", "",
            f"Over the {len(q)} kept runs with a step record of their kind, the run's own step (its last epoch's mean, "
            "trained beside other runs) over the record's: median "
            f"{quart[1]:.2f}x, middle half {quart[0]:.2f}-{quart[2]:.2f}x, range {q[0]:.2f}-{q[-1]:.2f}x. Both are wall "
            "clocks on shared machines, so a projection above is a run's cost to within that spread (half of the kept runs "
            "fall inside the middle half). Farthest: " +
            "; ".join(f"{r['paper']}/{r['artifact']} {r['method']} {x:.2f}x ({hours(r['kept_step_ms'])} against "
                      f"{hours(step(r[r['kept_kind']]))} ms)" for r, x in far) + ". A selector rebuilt "
            "every T steps rebuilds inside the training step: its record's step counts here with its index build "
            "spread over the T steps."]


PAPERS = sorted((p.name for p in (REPO / "config" / "experiments").iterdir() if p.is_dir()), key=len, reverse=True)


def data_at_hand(mirrors: list[str] | None = None):
    """dataset -> whether this machine has its files or can download them, as the DAG's first lines judge it
    (`steps_before_fetch`); the datasets that need a manual download are named on stderr, once each, so
    `--targets` offers only runs that can start here."""
    from xcbench.catalogue import load_datasets
    from xcbench.data.fetch import steps_before_fetch
    from xcbench.io import read_yaml

    catalogue, data = load_datasets(), read_yaml(REPO / "config" / "config.yaml")["data"]
    roots = [r if Path(r).is_absolute() else REPO / r for r in (data["mirrors"] if mirrors is None else mirrors)]

    @functools.cache
    def has(dataset: str) -> bool:
        steps = steps_before_fetch(catalogue[dataset], REPO / data["root"] / "raw" / dataset, roots)
        if steps:
            print(f"paper_cost: skipping the claims on {dataset}: " + "; ".join(steps), file=sys.stderr)
        return not steps
    return has


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kept", type=Path, default=REPO / "reference" / "paper" / "results" / "paper")
    p.add_argument("--resume-from", type=Path, default=REPO / "results" / "paper",
                   help="where cut runs' checkpoint.pt files are (this work tree's results); a cut run without one "
                        "owes its whole run")
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--targets", type=int, default=None, metavar="N",
                   help="print only the result files of the runs the N cheapest waiting claims owe (Snakemake targets, "
                        "cheapest claim first), writing nothing")
    p.add_argument("--kind", choices=("cpu", "gpu"), default="cpu", help="cheapest on this kind of machine (--targets)")
    a = p.parse_args()
    rows = plan(a.kept, step_records(OUT), a.resume_from)
    if a.targets is not None:
        print("\n".join(next_targets(rows, a.targets, a.kind, data_at_hand())))
        return
    a.out_dir.mkdir(parents=True, exist_ok=True)
    write_outputs("paper_cost", rows, markdown(rows), a.out_dir)
    print(markdown(rows))


if __name__ == "__main__":
    main()
