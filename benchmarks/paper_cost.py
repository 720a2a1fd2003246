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
from pathlib import Path

from common import write_outputs

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
    """What sets a run's step cost: its head and the head's parameters, the model, the batch size and the
    optimiser (not its learning rate, epochs, schedule or seed)."""
    from xcbench.runspec import method_config

    spec, train, model = method_config(exp, dataset, method)
    return json.dumps([spec.get("head"), spec.get("params"), model, train.get("batch_size"), train.get("optimizer")],
                      sort_keys=True, default=str)


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


@functools.cache
def paper_experiments() -> tuple[list[Path], list[dict]]:
    """Every experiment file and its settings at the paper scale."""
    from xcbench.config import load_experiment, resolve_experiment

    files = sorted((REPO / "config" / "experiments").glob("*/*.yaml"))
    return files, [resolve_experiment(load_experiment(f), "paper") for f in files]


def plan(root: Path, records: list[dict], resume_from: Path | None = None) -> list[dict]:
    from xcbench.config import load_datasets
    from xcbench.reporting.stop_rule import as_today
    from xcbench.run import expected_runs, run_location, view_runs
    from xcbench.runspec import encoder_config, method_config

    rows, catalogue = [], load_datasets()
    files, resolved = paper_experiments()
    exps = {(e["paper"], e["artifact"]): e for e in resolved}  # what another artifact's step record was measured on
    for f, exp in zip(files, resolved):
        if exp.get("runs_of"):
            continue  # a view: its runs are its owner's
        epochs = int(exp.get("train", {}).get("epochs", 1))
        for d, m, s in sorted(set(expected_runs(exp)) | {r for r in view_runs(f, "paper") if r[1] in exp["methods"]}):
            owner, key = run_location(exp, d, m, s)
            if owner != exp["artifact"]:
                continue  # trained (and counted) by the artifact that owns the identical run
            metrics = root / exp["paper"] / owner / d / key / f"seed{s}" / "metrics.json"
            done = json.loads(metrics.read_text()) if metrics.exists() else None
            if done:  # trained past where today's stopping rule ends it: finished there
                done = as_today(done, method_config(exp, d, m)[1])
            trained = (done.get("cut_short_after_epoch") or epochs) if done else 0
            ckpt = resume_from / exp["paper"] / owner / d / key / f"seed{s}" / "checkpoint.pt" if resume_from else None
            row = {"paper": exp["paper"], "artifact": exp["artifact"], "dataset": d, "method": m, "key": key, "seed": s,
                   "epochs": epochs, "kept_epochs": min(trained, epochs), "kept_device": (done or {}).get("device_name"),
                   "checkpoint_epoch": checkpoint_epoch(ckpt) if trained < epochs else None}
            # an unfinished run continues from its checkpoint (whatever run made it); without one it starts again
            owed = epochs - (row["checkpoint_epoch"] or 0) if trained < epochs else 0
            mine = step_signature(exp, d, m)
            recurrent = "lstm" in str(encoder_config(method_config(exp, d, m)[2]).get("name", ""))

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
                    row[kind] = {"step_ms": r["step_ms"], "floor_ms": floor, "run_h": run_h,
                                 "left_h": run_h * owed / epochs,
                                 "device": r.get("device"), "source": r["source"]}
            if "cpu" not in row and "gpu" not in row:
                row["to_measure"] = how_to_measure(f, exp, d, catalogue)
            rows.append(row)
    return rows


def how_to_measure(path: Path, exp: dict, dataset: str, catalogue: dict) -> dict:
    """Why a run has no step rate and what gives it one: a measurement job (no training: its cost is its own
    wall time), or the dataset's source (generated here, downloaded with the mirror tried first, or a manual
    download) and the train_step command to run once the data is prepared; a learning-rate grid's points are
    measured through the experiment they extend, whose methods they step as."""
    from xcbench.config import dataset_entry
    from xcbench.registry import TASKS

    if not getattr(TASKS.get(exp["task"]["name"]), "trains", True):
        return {"why": "a measurement job, nothing trained: its cost is its own wall time", "command": None}
    entry = dataset_entry(dataset, catalogue)
    page = next((f.get("page") for f in entry.get("files", []) if f.get("page")), None)
    why = ("data generated here" if entry.get("generator") else
           f"data by manual download ({page})" if entry.get("available") is False else
           "data downloaded from its URL (the mirror first)")
    if exp.get("extends") and any("grid_of" in m for m in exp["methods"].values()):
        path = path.with_name(f"{exp['extends']}.yaml")  # grid points step as their methods: measure those
    cmd = (f"python benchmarks/train_step.py --experiment {path.relative_to(REPO)} --scale paper --dataset {dataset} "
           f"--processed data/processed/{dataset}/dataset.npz")
    if exp.get("features"):
        cmd += f" --features data/features/{dataset}/{exp['features']['extractor']}{exp['features']['dim']}.pt"
    return {"why": why, "command": cmd}


def claims_waiting(rows: list[dict]) -> list[dict]:
    """For every claim of `config/claims/` and dataset it is checked on at the paper scale: the runs (first seed)
    it compares that are not kept whole, with the hours they still owe; claims whose runs are all kept whole are
    left out. A claim comparing datasets (`across`) waits on its runs on every dataset, as one row."""
    from xcbench.io import read_yaml
    from xcbench.reporting.claims import side_methods
    from xcbench.run import run_location

    files, resolved = paper_experiments()
    exps = {(e["paper"], e["artifact"]): e for e in resolved}
    index = {(r["paper"], r["artifact"], r["dataset"], r["key"], r["seed"]): r for r in rows}
    out = []
    for f in sorted((REPO / "config" / "claims").glob("*.yaml")):
        spec = read_yaml(f)
        for c in spec["claims"]:
            exp = exps.get((spec["paper"], c["artifact"]))
            if exp is None:
                continue
            sides = [c.get("left"), c.get("right")] + list(c.get("across", {}).get("gain", {}).values())
            sides = [x for x in sides if x]
            methods = sorted({m for x in sides for m in side_methods(x, exp) if m in exp["methods"]})
            named = {x["dataset"] for x in sides if x.get("dataset")}
            datasets = [d for d in exp["datasets"] if not named or d in named]
            groups = [("all", datasets)] if "across" in c else [(d, [d]) for d in datasets]
            for label, ds in groups:
                need = []
                for d in ds:
                    for m in methods:
                        owner, key = run_location(exp, d, m, exp["seeds"][0])
                        r = index.get((exp["paper"], owner, d, key, exp["seeds"][0]))
                        if r is not None and r["kept_epochs"] < r["epochs"]:
                            need.append(r)
                if need:
                    out.append({"paper": spec["paper"], "claim": c["id"], "dataset": label, "runs": need,
                                "cpu_h": _owed(need, "cpu"), "gpu_h": _owed(need, "gpu")})
    return out


def _owed(runs: list[dict], kind: str) -> float | None:
    """Hours the runs still owe on this kind of machine; None where one of them is not measured on it."""
    return sum(r[kind]["left_h"] for r in runs) if all(kind in r for r in runs) else None


def claims_section(rows: list[dict], top: int = 30) -> list[str]:
    """The claims nearest to a verdict at the paper's settings: those waiting on the fewest CPU-hours."""
    waiting = claims_waiting(rows)
    if not waiting:
        return []
    key = lambda w: (w["cpu_h"] is None, w["cpu_h"] or 0.0, w["gpu_h"] is None, w["gpu_h"] or 0.0)  # noqa: E731
    waiting.sort(key=key)
    lines = ["", "## Claims waiting on runs", "",
             f"What to train next: each claim of `config/claims/` on each dataset it is checked on at the paper scale, "
             f"with the runs it compares (first seed) not kept whole and the hours they still owe; `-` where a run has "
             f"no step rate on that kind of machine. The {min(top, len(waiting))} cheapest on the CPU of "
             f"{len(waiting)} waiting; a run kept cut short counts as owed (its claim is checked at its last epoch "
             f"until then).", "",
             "| claim | dataset | runs owed | CPU h | GPU h |", "|---|---|---|---|---|"]
    for w in waiting[:top]:
        runs = ", ".join(f"{r['artifact']}/{r['method']}" + (f" ({r['kept_epochs']}/{r['epochs']})" if r["kept_epochs"]
                                                              else "") for r in w["runs"])
        lines.append(f"| {w['paper']}: {w['claim']} | {w['dataset']} | {runs} | {_h(w['cpu_h'])} | {_h(w['gpu_h'])} |")
    return lines


def unmeasured_section(rows: list[dict]) -> list[str]:
    """The runs without a step rate, by artifact and dataset: why, and the command that measures them."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "to_measure" in r and r["kept_epochs"] < r["epochs"]:
            groups.setdefault((r["paper"], r["artifact"], r["dataset"]), []).append(r)
    if not groups:
        return []
    lines = ["", "## Runs without a step rate", "",
             "Each needs its data prepared (`snakemake --cores 1 data/processed/<dataset>/dataset.npz`, and the "
             "features where the task reads them), then the command beside it.", "",
             "| artifact | dataset | runs | why none | measure with |", "|---|---|---|---|---|"]
    for (p, a, d), rs in groups.items():
        m = rs[0]["to_measure"]
        cmd = f"`{m['command']}`" if m["command"] else "-"
        lines.append(f"| {p}/{a} | {d} | {len(rs)} | {m['why']} | {cmd} |")
    return lines


def _h(x: float | None) -> str:
    return "-" if x is None else (f"{x:.2f}" if x < 10 else f"{x:,.0f}")


def markdown(rows: list[dict]) -> str:
    arts: dict[tuple, list[dict]] = {}
    for r in rows:
        arts.setdefault((r["paper"], r["artifact"]), []).append(r)
    lines = ["# Cost plan of the paper scale", "",
             "Per artifact: its own runs (views render other artifacts' runs and are not listed), how many are kept "
             "in `reference/paper` whole or cut short, and the hours the rest still needs from measured step rates "
             "(`benchmarks/out/train_step_*.json`: CPU at the threads named there, GPU on the card named there); "
             "a learning-rate grid point (`full.lr0.003`) takes its method's rate, as the lr changes no step's cost; "
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
        cells = [f"{_h(sum(v))} ({len(v)})" if v else "-" for v in (left["cpu"], left["gpu"])]
        lines.append(f"| {p} | {a} | {len(rs)} | {whole} | {cut} | {len(rs) - whole - cut} | {cells[0]} | {cells[1]} | "
                     f"{unmeasured} |")
    resumable = sum(r["checkpoint_epoch"] is not None for r in rows)
    lines += ["", f"Measured runs still to train: {_h(tot['cpu'])} CPU-hours or {_h(tot['gpu'])} GPU-hours "
              "(each total over the runs measured on that kind of machine; an unfinished run owes the epochs after "
              f"its checkpoint in this work tree, {resumable} have one, else its whole run, even where the reference "
              "tree keeps it cut short). The whole paper scale from scratch, over the runs "
              f"measured: {_h(sum(scratch['cpu']))} CPU-hours ({len(scratch['cpu'])} runs) or "
              f"{_h(sum(scratch['gpu']))} GPU-hours ({len(scratch['gpu'])} runs).", "",
              "## Runs with a measured step rate", "",
              "matmul floor: the step's matrix-product FLOPs at the device's measured product rate (train_step.py); "
              "`-` for an LSTM model measured before train_step counted the fused recurrent ops (torch's FlopCounterMode "
              "counts them as 0: such a floor left out the LSTM, e.g. 34 GFLOP a step at MIDX table4_adam's batch).", "",
              "| artifact | dataset | method | epochs (kept) | CPU ms / step | matmul floor ms | CPU h | GPU ms / step | GPU h |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "cpu" not in r and "gpu" not in r:
            continue
        c, g = r.get("cpu", {}), r.get("gpu", {})
        lines.append(f"| {r['paper']}/{r['artifact']} | {r['dataset']} | {r['method']} | {r['epochs']} ({r['kept_epochs']}) | "
                     f"{_h(c.get('step_ms'))} | {_h(c.get('floor_ms'))} | {_h(c.get('run_h'))} | {_h(g.get('step_ms'))} | "
                     f"{_h(g.get('run_h'))} |")
    lines += claims_section(rows)
    lines += unmeasured_section(rows)
    return "\n".join(lines) + "\n"


PAPERS = sorted((p.name for p in (REPO / "config" / "experiments").iterdir() if p.is_dir()), key=len, reverse=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kept", type=Path, default=REPO / "reference" / "paper" / "results" / "paper")
    p.add_argument("--resume-from", type=Path, default=REPO / "results" / "paper",
                   help="where cut runs' checkpoint.pt files are (this work tree's results); a cut run without one "
                        "owes its whole run")
    p.add_argument("--out-dir", type=Path, default=OUT)
    a = p.parse_args()
    rows = plan(a.kept, step_records(OUT), a.resume_from)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    write_outputs("paper_cost", rows, markdown(rows), a.out_dir)
    print(markdown(rows))


if __name__ == "__main__":
    main()
