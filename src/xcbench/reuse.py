"""A finished run of the same settings under another name: copied, not trained again.

A run is a pure function of its settings and seed (explicit generators everywhere), so a run whose identity
(`run.identity`: its spec less the artifact and method names, and less the package version that wrote it; a key
today's spec has and an older record lacks reads None) equals that of a finished run in the same paper's results
computes the same numbers. That happens whenever the artifact that owns a run changes (run.trainers:
runs of equal settings train once, under the first table that has them): a table's head moved to the lr its
grid found best makes the grid's run at that lr the table's seed-0 run, and the grid's run at the old lr the one
the table had trained. `xcbench train` copies such a run (`--no-reuse`: train it anyway) and records where from:
`reused_from` in its metrics.json and config.resolved.yaml, as a path from the folder that holds the results tree
(`results/paper/xcbench/seqrec_lr/...`), so that a record reads the same in every clone.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.io import read_json, read_yaml, write_json, write_text, write_yaml
from xcbench.run import Run, identity


def find_identical(run: Run, out_dir: str | Path) -> Path | None:
    """The folder of a finished run with `run`'s identity under the same results/<scale>/<paper>/ as `out_dir`
    (<artifact>/<dataset>/<method>/seed<s>), judged by the settings it recorded; None if there is none."""
    out_dir = Path(out_dir).resolve()
    if len(out_dir.parents) < 5:
        return None
    paper_dir = out_dir.parents[3]
    if paper_dir.name != run.spec["paper"] or paper_dir.parent.name != run.spec["scale"]:
        return None  # not a results tree's run folder: nothing to search
    want = identity(run.spec)
    for cfg in sorted(paper_dir.glob(f"*/{run.dataset}/*/seed{run.seed}/config.resolved.yaml")):
        if cfg.parent == out_dir or not (cfg.parent / "metrics.json").exists():
            continue
        if identity(read_yaml(cfg) or {}, like=run.spec) == want:  # an older record: today's keys (run.identity)
            return cfg.parent
    return None


def _where(src: Path, out_dir: Path) -> str:
    """`src` from the folder above its results tree (results/<scale>/<paper>/...), else as given."""
    parents = out_dir.resolve().parents  # <root>/results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<s>
    if len(parents) > 6 and src.resolve().is_relative_to(parents[6]):
        return str(src.resolve().relative_to(parents[6]))
    return str(src)


def copy_run(run: Run, src: Path, out_dir: str | Path) -> dict:
    """Write `src`'s results as `run`'s: its history and metrics, its recorded settings under `run`'s names."""
    out_dir = Path(out_dir)
    where = _where(Path(src), out_dir)
    metrics = {**read_json(src / "metrics.json"), "method": run.method, "reused_from": where}
    cfg = {**(read_yaml(src / "config.resolved.yaml") or {}), **run.spec, "experiment": run.exp, "reused_from": where}
    write_yaml(out_dir / "config.resolved.yaml", cfg)
    write_text(out_dir / "history.csv", (src / "history.csv").read_text())
    write_json(out_dir / "metrics.json", metrics)
    return metrics
