"""`xcbench rerender`: every table, figure, claims check and REPORT of a kept results tree (reference/<scale>),
rendered again from its results alone, with each paper's claims evaluated over the artifacts that have runs.

A run trained with other settings than today's experiment file gives it (`drift`) is rendered as it is, with a
warning here and a flag in its caption; `xcbench keep` refuses such runs, so a kept tree holds none.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xcbench.config import ROOT, ConfigError
from xcbench.registry import RENDERERS
from xcbench.reporting.claims import write_claims
from xcbench.reporting.collect import collect, for_rendering, with_runs_only
from xcbench.reporting.report import write_headlines, write_report


def rerender(root: Path, scale: str, catalogue: dict, readme: str | None = None) -> list[Path]:
    """Render `root`/results into `root`/figures; with `readme`, also write the claims into its region for
    `scale`. Returns the artifacts rendered (a table's .md, a figure's .png)."""
    results, figures = root / "results", root / "figures"
    claims, artifacts = [], []
    for paper_dir in sorted((ROOT / "config" / "experiments").iterdir()):
        done = []
        for f in sorted(paper_dir.glob("*.yaml")):
            exp = for_rendering(f, scale, results)
            recs = collect(results, exp)
            if not recs:
                continue
            for r in (r for r in recs if r.get("drift")):
                print(f"warning: {paper_dir.name}/{f.stem} {r['dataset']}/{r['method']} seed {r['seed']} was trained "
                      f"with other settings than today's {f}: {'; '.join(r['drift'])} (rerun it to update)", file=sys.stderr)
            exp = with_runs_only(exp, recs)
            out = figures / paper_dir.name / f.stem
            for p in RENDERERS.get(exp["render"]["renderer"])(exp, str(results), str(out), catalogue):
                print("wrote", p)
            done.append(out.with_suffix(".md" if exp["render"]["kind"] == "table" else ".png"))
        claims_file = ROOT / "config" / "claims" / f"{paper_dir.name}.yaml"
        if done and claims_file.exists():
            write_claims(claims_file, paper_dir, results, scale, figures / paper_dir.name / "claims.md",
                         only={p.stem for p in done})
            claims.append(figures / paper_dir.name / "claims.json")
        artifacts += done
    if not artifacts:
        raise ConfigError(f"{results}: no results of scale {scale!r} for any experiment")
    write_report(claims, artifacts, figures / "REPORT.md")
    print("wrote", figures / "REPORT.md")
    if readme:
        write_headlines(claims, readme, scale)
        print(f"wrote the {scale}-scale claims into", readme)
    return artifacts
