"""What the cost plan (paper_cost.py) orders next: the claims of `config/claims/` waiting on runs, with the hours
those runs still owe (cheapest first: what a run lets us check), and the runs without a step rate, with why (a
measurement job that trains nothing, or where the data comes from) and the train_step command that measures them.
"""

from __future__ import annotations

import functools
from pathlib import Path

from proxy_sizes import SEQ_SIZES

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def paper_experiments() -> tuple[list[Path], list[dict]]:
    """Every experiment file and its settings at the paper scale."""
    from xcbench.config import load_experiment, resolve_experiment

    files = sorted((REPO / "config" / "experiments").glob("*/*.yaml"))
    return files, [resolve_experiment(load_experiment(f), "paper") for f in files]


def hours(x: float | None) -> str:
    return "-" if x is None else (f"{x:.2f}" if x < 10 else f"{x:,.0f}")


def is_lr_grid(exp: dict) -> bool:
    """A learning-rate grid extending an experiment (`xmc_lr`): its points step as the methods they extend."""
    return bool(exp.get("extends")) and any("grid_of" in m for m in exp["methods"].values())


def how_to_measure(path: Path, exp: dict, dataset: str, catalogue: dict) -> dict:
    """Why a run has no step rate and what gives it one: a measurement job (no training: its cost is its own
    wall time), or the dataset's source (generated here, downloaded with the mirror tried first, or a manual
    download) and the train_step command to run once the data is prepared; a learning-rate grid's points are
    measured through the experiment they extend, whose methods they step as."""
    from xcbench.catalogue import dataset_entry, features_path
    from xcbench.registry import TASKS

    if not getattr(TASKS.get(exp["task"]["name"]), "trains", True):
        return {"why": "a measurement job, nothing trained: its cost is its own wall time", "command": None}
    entry = dataset_entry(dataset, catalogue)
    page = next((f.get("page") for f in entry.get("files", []) if f.get("page")), None)
    why = ("data generated here" if entry.get("generator") else
           f"data by manual download ({page})" if entry.get("available") is False else
           "data downloaded from its URL (the mirror first)")
    if is_lr_grid(exp):
        path = path.with_name(f"{exp['extends']}.yaml")  # grid points step as their methods: measure those
    cmd = (f"python benchmarks/train_step.py --experiment {path.relative_to(REPO)} --scale paper --dataset {dataset} "
           f"--processed data/processed/{dataset}/dataset.npz")
    features = features_path(exp.get("features"), entry)
    if features:
        cmd += f" --features {features}"
    # no data at hand (a manual download, or a log fetched from its URL, which a run downloads): a synthetic set of
    # its shape steps as it does
    if entry.get("available") is False or dataset in SEQ_SIZES:
        cmd = (f"python benchmarks/shape_proxy.py {dataset} --experiments {path.relative_to(REPO)}` (no data needed; "
               f"with the data: `{cmd}")
    return {"why": why, "command": cmd}


SETTLED_AT_START = ("log_n_classes", "n_classes")  # a run's constants: known once it has started


def settled_at_start(metric: str) -> bool:
    """Whether a claim's metric is fixed before the first epoch ends (the curve's first point, `initial.*`, or a
    constant of the run), so that a run kept cut short already gives its final value."""
    return metric.startswith("initial.") or metric in SETTLED_AT_START


def claims_waiting(rows: list[dict]) -> list[dict]:
    """For every claim of `config/claims/` and dataset it is checked on at the paper scale: the runs (first seed)
    it compares that are not kept whole, with the hours they still owe; claims whose runs are all kept whole are
    left out, and so are those that read only metrics settled at a run's start from runs kept at all (cut short
    too). A claim comparing datasets (`across`) waits on its runs on every dataset, as one row."""
    from xcbench.io import read_yaml
    from xcbench.reporting.claim_values import claim_sides, side_methods
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
            sides = claim_sides(c)
            early = all(settled_at_start(x.get("metric", "")) for x in sides)
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
                        if r is not None and r["kept_epochs"] < r["epochs"] and not (early and r["kept_epochs"]):
                            need.append(r)
                if need:
                    out.append({"paper": spec["paper"], "claim": c["id"], "dataset": label, "runs": need,
                                "cpu_h": _owed(need, "cpu"), "gpu_h": _owed(need, "gpu")})
    return out


def _owed(runs: list[dict], kind: str) -> float | None:
    """Hours the runs still owe on this kind of machine; None where one of them is not measured on it."""
    return sum(r[kind]["left_h"] for r in runs) if all(kind in r for r in runs) else None


def cheapest_claims(rows: list[dict], kind: str = "cpu") -> list[dict]:
    """claims_waiting, those owing the fewest hours on `kind` ("cpu" or "gpu") first; those with a run not measured
    there last (then by the other kind's hours)."""
    other = "gpu" if kind == "cpu" else "cpu"
    return sorted(claims_waiting(rows), key=lambda w: (w[f"{kind}_h"] is None, w[f"{kind}_h"] or 0.0,
                                                       w[f"{other}_h"] is None, w[f"{other}_h"] or 0.0))


def next_targets(rows: list[dict], n: int, kind: str = "cpu", has_data=lambda dataset: True) -> list[str]:
    """The result files of the runs owed by the `n` claims cheapest on `kind` (only claims measured there, and
    whose every run's dataset `has_data`), each once, in that order: Snakemake targets that train the plan's next
    runs, for example `snakemake --cores 2 --config scale=paper -- $(python benchmarks/paper_cost.py --targets 3)`."""
    out: list[str] = []
    offered = [w for w in cheapest_claims(rows, kind)
               if w[f"{kind}_h"] is not None and all(has_data(r["dataset"]) for r in w["runs"])]
    for w in offered[:n]:
        for r in w["runs"]:
            t = f"results/paper/{r['paper']}/{r['artifact']}/{r['dataset']}/{r['key']}/seed{r['seed']}/metrics.json"
            if t not in out:
                out.append(t)
    return out


def claims_section(rows: list[dict], top: int = 30) -> list[str]:
    """The claims nearest to a verdict at the paper's settings: those waiting on the fewest CPU-hours."""
    waiting = cheapest_claims(rows, "cpu")
    if not waiting:
        return []
    lines = ["", "## Claims waiting on runs", "",
             f"What to train next: each claim of `config/claims/` on each dataset it is checked on at the paper scale, "
             f"with the runs it compares (first seed) not kept whole and the hours they still owe; `-` where a run has "
             f"no step rate on that kind of machine. The {min(top, len(waiting))} cheapest on the CPU of "
             f"{len(waiting)} waiting; a run kept cut short counts as owed (its claim is checked at its last epoch "
             f"until then), except for claims that read only what a run's start settles (`initial.*`, log n).", "",
             "| claim | dataset | runs owed | CPU h | GPU h |", "|---|---|---|---|---|"]
    for w in waiting[:top]:
        runs = ", ".join(f"{r['artifact']}/{r['method']}" + (f" ({r['kept_epochs']}/{r['epochs']})" if r["kept_epochs"]
                                                              else "") for r in w["runs"])
        lines.append(f"| {w['paper']}: {w['claim']} | {w['dataset']} | {runs} | {hours(w['cpu_h'])} | {hours(w['gpu_h'])} |")
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
