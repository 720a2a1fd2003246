"""The Snakemake DAG: a full tiny-scale run in a temporary copy, lint, dry-runs, config errors."""

import json
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from conftest import REPO


def _copy_workflow(dst):
    for item in ("Snakefile", "workflow", "config", "profiles"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / item)
    return dst


def _snakemake(cwd, *args, timeout=900):
    """Run snakemake; its messages go to stdout or stderr depending on version: `.out` holds both."""
    r = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    r.out = r.stdout
    return r


@pytest.mark.slow
def test_tiny_end_to_end_run(tmp_path):
    wd = _copy_workflow(tmp_path)
    r = _snakemake(wd, "--cores", "2", "--config", "scale=tiny")
    assert r.returncode == 0, r.out[-3000:]
    table = (wd / "figures" / "baseline" / "xmc_table.md").read_text()
    assert "Full softmax" in table and "Scale: tiny" in table
    for f in ("xmc_table.csv", "xmc_table.tex", "xmc_curves.png", "xmc_curves.pdf", "claims.md"):
        assert (wd / "figures" / "baseline" / f).stat().st_size > 0
    assert "## Claims" in (wd / "figures" / "REPORT.md").read_text()
    for f in ("table1.md", "table2.md", "table3.md", "fig1.png", "fig2.png", "fig3.png", "fig4.png", "claims.md"):
        assert (wd / "figures" / "rff" / f).stat().st_size > 0, f
    assert "Synthetic sphere (tiny) ms" in (wd / "figures" / "rff" / "table2.md").read_text()
    # every artifact of every paper exists and is non-empty; every claim row was evaluated
    for exp_file in sorted((wd / "config" / "experiments").glob("*/*.yaml")):
        paper, art = exp_file.parent.name, exp_file.stem
        for ext in ("html", "md") if (wd / "figures" / paper / f"{art}.md").exists() else ("html", "png", "pdf"):
            assert (wd / "figures" / paper / f"{art}.{ext}").stat().st_size > 0, f"{paper}/{art}.{ext}"
    for claims in (wd / "config" / "claims").glob("*.yaml"):
        rows = json.loads((wd / "figures" / claims.stem / "claims.json").read_text())["rows"]
        verdicts = [r["verdict"].split(" (")[0].split(":")[0] for r in rows]  # "not held (why)", "not testable: why"
        assert rows and all(v in ("held", "not held", "not at this scale", "not testable") for v in verdicts), claims.stem
        ids = {c["id"] for c in __import__("yaml").safe_load(claims.read_text())["claims"]}
        assert ids == {r["id"] for r in rows}, f"{claims.stem}: claims without a row: {ids - {r['id'] for r in rows}}"
        assert (wd / "figures" / claims.stem / "claims.html").stat().st_size > 0
    assert (wd / "figures" / "REPORT.html").stat().st_size > 0
    # nothing left to do on a rerun; one table can be rebuilt alone from cached results
    r = _snakemake(wd, "--cores", "1", "--config", "scale=tiny")
    assert "Nothing to be done" in r.out
    (wd / "figures" / "baseline" / "xmc_table.md").unlink()
    r = _snakemake(wd, "figures/baseline/xmc_table.md", "--cores", "1", "--config", "scale=tiny")
    out = r.out
    assert r.returncode == 0 and "table" in out and "rule train" not in out
    # training depends on the run spec, not the file: a notes edit re-renders only, a changed lr retrains
    exp = wd / "config" / "experiments" / "baseline" / "xmc_table.yaml"
    text = exp.read_text()
    assert 'notes: "' in text
    exp.write_text(text.replace('notes: "', 'notes: "A new first sentence. ', 1))
    r = _snakemake(wd, "-n", "--config", "scale=tiny")
    assert r.returncode == 0 and "rule train" not in r.out and "xmc_table" in r.out, r.out[-2000:]
    assert "lr: 0.001," in text
    exp.write_text(text.replace("lr: 0.001,", "lr: 0.0123,", 1))
    r = _snakemake(wd, "-n", "--config", "scale=tiny")
    assert "rule train" in r.out, r.out[-2000:]
    exp.write_text(text)
    # the HTML report embeds the figures
    r = _snakemake(wd, "--config", "scale=tiny", "--report", "report.html")
    assert r.returncode == 0, r.out[-2000:]
    assert (wd / "report.html").stat().st_size > 10000


def _train_jobs(out: str) -> Counter:
    """(paper, artifact) -> train jobs listed by `snakemake -n`."""
    jobs = Counter()
    for block in out.split("\n\n"):
        if "rule train:" in block:
            w = dict(kv.split("=", 1) for kv in re.search(r"wildcards: (.*)", block).group(1).split(", "))
            jobs[(w["paper"], w["artifact"])] += 1
    return jobs


def test_paper_scale_dry_run(tmp_path):
    """At the paper scale the DAG lists one train job per run of the run module's plan (every artifact's runs
    and the seeds its views add, runs of equal settings once, under the artifact that trains them), the
    papers' grids among them (MIDX Table 4: 8 samplers x 2 encoders x 2 datasets; RF-softmax Table 1: 5
    estimators x 3 datasets)."""
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.run import expected_runs, run_location

    r = _snakemake(_copy_workflow(tmp_path), "-n", "--config", "scale=paper")
    assert r.returncode == 0, r.out[-2000:]
    planned = set()
    for f in sorted((REPO / "config" / "experiments").glob("*/*.yaml")):
        exp = resolve_experiment(load_experiment(f), "paper")
        planned |= {(exp["paper"], *run_location(exp, d, m, s), d, s) for d, m, s in expected_runs(exp)}
    jobs = _train_jobs(r.out)
    assert jobs == Counter((p, owner) for p, owner, *_ in planned)
    assert jobs[("midx", "table4")] == 32 and jobs[("rff", "table1")] == 15 and "wikipedia-500k" in r.out
    # the XC sets served from Google Drive only: each named with its page and folder before any job is listed
    head = r.out[:r.out.index("Job stats")]
    assert "6 file(s) need a manual download" in head
    for f in ("Amazon670K", "AmazonCat-13K", "DeliciousLarge", "Wiki10-31K", "WikiLSHTC", "Wiki500K"):
        assert f"{f}.bow.zip: download it from https://manikvarma.github.io/" in head, f


def test_every_compute_job_runs_one_torch_thread_and_quick_jobs_stay_on_the_cpu(tmp_path):
    """`--cores N` runs at most N jobs of one thread each (no N x N oversubscription); quick-scale
    runs ask for no GPU and run on the CPU."""
    r = _snakemake(_copy_workflow(tmp_path), "-n", "-p", "--cores", "2", "--config", "scale=quick")
    assert r.returncode == 0, r.out[-2000:]
    cmds = [ln for ln in r.out.splitlines() if " -m xcbench train " in ln or " -m xcbench features " in ln]
    assert cmds and all("--threads 1 " in c for c in cmds)
    assert all("--device cpu " in c for c in cmds if " train " in c)
    assert "gpu=1" not in r.out


def test_lint_is_clean(tmp_path):
    r = _snakemake(_copy_workflow(tmp_path), "--lint")
    assert r.returncode == 0, r.out[-3000:]


def test_unknown_config_key_fails_the_dag(tmp_path):
    r = _snakemake(_copy_workflow(tmp_path), "-n", "--config", "scael=tiny")
    assert r.returncode != 0 and "scael" in r.out


def test_unknown_paper_fails_the_dag(tmp_path):
    r = _snakemake(_copy_workflow(tmp_path), "-n", "--config", "papers=[nopaper]")
    assert r.returncode != 0 and "nopaper" in r.out
