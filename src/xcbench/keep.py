"""`xcbench keep`: copy finished runs of a results tree into a kept tree (reference/<scale>), as they are.

A run folder `results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>` is kept as
`<root>/results/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>`: its metrics.json, history.csv and
config.resolved.yaml, each written to a temporary file and renamed, so a kept tree never holds half a run.
Refused, with the reason, and nothing of it copied:
- a run that has not finished (no metrics.json: a cut run keeps only its checkpoint);
- a run not where today's experiment files put it (`run.Run.location`: runs of equal settings live under the
  first table that has them, so a grid point the table owns is kept from the table's folder);
- a run trained with other settings than today's experiment file gives it (`reporting/drift.py`), which
  `xcbench rerender` would flag in its caption.
`xcbench rerender --root <root>` then renders the kept tree again.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.config import ROOT, ConfigError, load_experiment, resolve_experiment
from xcbench.io import read_json, read_yaml, write_text
from xcbench.reporting.drift import drift
from xcbench.reporting.stop_rule import as_today
from xcbench.run import make_run

FILES = ("metrics.json", "history.csv", "config.resolved.yaml")


def _parts(run_dir: Path) -> tuple[str, str, str, str, str, int]:
    """(scale, paper, artifact, dataset, method, seed) of a run folder's path."""
    p = run_dir.resolve()
    if len(p.parents) < 7 or not p.name.startswith("seed") or not p.name[4:].isdigit():
        raise ConfigError(f"{run_dir}: not a run folder (<results>/<scale>/<paper>/<artifact>/<dataset>/<method>/seed<k>)")
    method, dataset, artifact, paper, scale = (p.parents[i].name for i in range(5))
    return scale, paper, artifact, dataset, method, int(p.name[4:])


def why_not(run_dir: Path, experiments: Path = ROOT / "config" / "experiments") -> str | None:
    """Why this run folder may not be kept; None where it may."""
    try:
        scale, paper, artifact, dataset, method, seed = _parts(run_dir)
    except ConfigError as e:
        return str(e).split(": ", 1)[1]
    if not (run_dir / "metrics.json").exists():
        return ("not finished: no metrics.json (a cut run has only its checkpoint; `xcbench train --finish` tests it "
                "as it stands and keeps the checkpoint, so that it can go on later)")
    f = experiments / paper / f"{artifact}.yaml"
    if not f.exists():
        return f"no experiment file {f}"
    run = make_run(resolve_experiment(load_experiment(f), scale, check_libraries=False), dataset, method, seed)
    if run.location != (artifact, method):
        return (f"today's experiment files put this run under {run.location[0]}/{dataset}/{run.location[1]} "
                "(the first table with these settings): keep it from there")
    rec = as_today(read_json(run_dir / "metrics.json"), run.train)  # read as collect reads it (rerender's view)
    diffs = drift(read_yaml(run_dir / "config.resolved.yaml") or {}, run.spec, rec)
    return f"trained with other settings than today's {f}: {'; '.join(diffs)}" if diffs else None


def keep(run_dirs: list[str | Path], root: str | Path) -> list[Path]:
    """Copy each run folder into `root`; raises ConfigError naming every refused run (none is copied then)."""
    run_dirs = [Path(d) for d in run_dirs]
    refused = [f"{d}: {why}" for d in run_dirs if (why := why_not(d))]
    if refused:
        raise ConfigError("not kept (nothing copied):\n  " + "\n  ".join(refused))
    out = []
    for d in run_dirs:
        scale, paper, artifact, dataset, method, seed = _parts(d)
        dst = Path(root, "results", scale, paper, artifact, dataset, method, f"seed{seed}")
        for name in FILES:
            if (d / name).exists():
                write_text(dst / name, (d / name).read_text())
        out.append(dst)
    return out
