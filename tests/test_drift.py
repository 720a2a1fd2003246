"""A kept run whose settings today's experiment file has changed is named, in collect and in the caption
(reporting/drift.py); how a job ran, a probe's empty train settings and a replayed longer stop patience are not."""

import functools
import json
from pathlib import Path

import pytest

from xcbench.config import ROOT, load_experiment
from xcbench.io import write_json, write_yaml
from xcbench.reporting.captions import run_status
from xcbench.reporting.collect import collect, for_rendering
from xcbench.reporting.drift import RUN_OPTIONS, drift
from xcbench.run import make_run

RULE = {"metric": "ppl", "mode": "min", "factor": 0.25, "patience": 2, "min_lr": 0.01, "min_delta": 0.1,
        "stop_patience": 3}
EXP = {"paper": "p", "artifact": "t", "title": "T", "task": {"name": "lm", "params": {}}, "scale": "quick",
       "render": {"kind": "table", "renderer": "metric_table", "metrics": ["ppl"]},
       "datasets": ["d"], "seeds": [0], "methods": {"m": {"head": "sampled_softmax", "label": "M", "params": {"m": 20}}},
       "train": {"epochs": 12, "batch_size": 8, "lr": 20.0, "schedule": "plateau", "plateau": RULE}}
VALS = [300.0, 200.0, 150.0, 140.0] + [139.99] * 8  # no gain of min_delta after epoch 4: today's rule stops at 7


def _record(epochs: int, best: int = 4) -> dict:
    """A run's metrics record over VALS[:epochs] at lr 20 (the plateau rule's lr changes at epoch 6 are not
    replayed here: every recorded lr is 20, the path a patience-2 rule follows until epoch 6)."""
    from xcbench.schedules import Plateau
    rule, lrs = Plateau(20.0, **{**RULE, "stop_patience": 100}), [0.0]
    for v in VALS[:epochs]:
        lrs.append(rule.lr)
        rule.update(v)
    return {"metrics": {"ppl": VALS[best - 1]}, "epochs": epochs, "best_epoch": best, "final": {"val_ppl": VALS[epochs - 1]},
            "curves": {"epoch": list(range(epochs + 1)), "lr": lrs, "val_ppl": [1e4] + VALS[:epochs]}}


def _spec(exp=EXP) -> dict:
    return make_run(exp, "d", "m", 0).spec


def test_settings_of_the_job_and_names_are_not_drift():
    rec = _spec()
    kept = {**rec, "artifact": "owner", "method": "other_key", "xcbench": "0.0.1", "data": {"rows": 3},
            "train": {**rec["train"], "checkpoint_minutes": 30.0, "finish": True, "stop_after": 1}}
    assert drift(kept, _spec(), {}) == []
    assert drift({**kept, "train": {}}, _spec(), {}) == []  # a probe records no train settings
    assert drift({k: v for k, v in kept.items() if k != "features"}, _spec(), {}) == []  # features: None today


def test_a_changed_setting_is_drift():
    rec = _spec()
    assert drift({**rec, "train": {**rec["train"], "lr": 10.0}}, _spec(), {}) == ["train.lr: 10.0 -> 20.0"]
    assert drift({**rec, "head_params": {"m": 50}}, _spec(), {}) == ["head_params.m: 50 -> 20"]
    assert drift({**rec, "model": {"encoder": {"name": "lstm_lm"}}}, _spec(), {}) == \
        ["model.encoder: {'name': 'lstm_lm'} -> '<absent>'"]
    assert drift({**rec, "train": {**rec["train"], "finish": True, "epochs": 5}}, _spec(), {}) == ["train.epochs: 5 -> 12"]


def test_the_run_options_are_the_fit_options():
    from dataclasses import fields

    from xcbench.train import FitOptions
    assert set(RUN_OPTIONS) == {f.name for f in fields(FitOptions)}


def test_a_longer_stop_patience_is_drift_only_where_the_run_is_not_todays(tmp_path):
    """Written with patience 100: read at today's stop (epoch 7) it is today's run; ended before today's rule
    would end it (a shorter patience), or selected after today's stop, it is not."""
    def kept(stop_patience: int, rec: dict) -> list[dict]:
        run = tmp_path / str(stop_patience) / "quick" / "p" / "t" / "d" / "m" / "seed0"
        spec = _spec()
        write_yaml(run / "config.resolved.yaml",
                   {**spec, "train": {**spec["train"], "plateau": {**RULE, "stop_patience": stop_patience}}})
        write_json(run / "metrics.json", rec)
        return collect(tmp_path / str(stop_patience), EXP)

    (read,) = kept(100, _record(12))
    assert read["epochs"] == 7 and "drift" not in read  # read where today's rule stops
    (cut,) = kept(101, _record(5))
    assert "drift" not in cut  # cut before today's stop: today's run to that epoch
    (shorter,) = kept(2, _record(6))
    assert shorter["drift"] == ["train.plateau.stop_patience: 2 -> 3"]
    (late,) = kept(100, _record(12, best=10))
    assert late["drift"] == ["train.plateau.stop_patience: 100 -> 3"]  # its test numbers come from after epoch 7
    assert "Trained with settings other than today's experiment file (kept runs; rerun them to update): M " \
           "(train.plateau.stop_patience)." in run_status(EXP, [late])


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_the_kept_trees_hold_todays_runs(scale):
    """Every kept run of reference/<scale> was trained with the settings today's experiment files give it
    (after an edit of a file: rerun its runs, or the caption says which were not)."""
    results, drifted = ROOT / "reference" / scale / "results", []
    for f in sorted((ROOT / "config" / "experiments").glob("*/*.yaml")):
        if "runs_of" in load_experiment(f):
            continue  # a view renders its owner's runs
        drifted += [f"{f.stem} {r['dataset']}/{r['method']}/{r['seed']}: {r['drift']}"
                    for r in collect(results, for_rendering(f, scale, results)) if r.get("drift")]
    assert drifted == []


def test_keep_reads_a_run_as_collect_does(tmp_path):
    """`xcbench keep` refuses what rerender would flag, and nothing more: a run trained under a longer stop
    patience, read where today's rule stops (stop_rule.as_today), is kept; one selected after that stop is not."""
    from xcbench.keep import why_not
    experiments = tmp_path / "experiments"
    write_yaml(experiments / "p" / "t.yaml", {k: v for k, v in EXP.items() if k != "scale"})
    spec = _spec()
    for name, rec in (("today", _record(12)), ("late", _record(12, best=10))):
        run = tmp_path / name / "quick" / "p" / "t" / "d" / "m" / "seed0"
        write_yaml(run / "config.resolved.yaml",
                   {**spec, "train": {**spec["train"], "plateau": {**RULE, "stop_patience": 100}}})
        write_json(run / "metrics.json", rec)
    assert why_not(tmp_path / "today" / "quick" / "p" / "t" / "d" / "m" / "seed0", experiments) is None
    assert "train.plateau.stop_patience: 100 -> 3" in why_not(tmp_path / "late" / "quick" / "p" / "t" / "d" / "m" / "seed0",
                                                              experiments)



@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_every_kept_run_is_one_keep_would_accept_today(scale):
    """Every kept run passes `xcbench keep`'s own rules today (keep.why_not): finished, trained with today's
    settings, and where today's files put it. The last matters when a table moves to the lr its grid found best:
    the grid's run at that lr becomes the table's (run.Run.location), and a copy left under the grid's folder is
    read by nothing, yet counted by whoever walks the tree (50 such copies were removed, nine of them older than
    their table's retrained run)."""
    from xcbench.keep import why_not

    results = ROOT / "reference" / scale / "results"
    refused = [f"{m.parent.relative_to(results)}: {w}" for m in sorted(results.glob("*/*/*/*/*/seed*/metrics.json"))
               if (w := why_not(m.parent))]
    assert refused == []


@functools.cache
def kept_claim_rows(scale: str) -> dict[str, list[dict]]:
    """{paper: the rows of its claims.json} as the kept tree of `scale` renders them (read once for both tests)."""
    figures = ROOT / "reference" / scale / "figures"
    return {f.parent.name: json.loads(f.read_text())["rows"] for f in sorted(figures.glob("*/claims.json"))}


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_the_kept_tree_is_what_rerender_makes_of_its_runs_today(scale, tmp_path, monkeypatch):
    """`xcbench rerender` of the kept runs into a scratch root gives the kept claims.json, tables (.md) and figure
    captions (.caption.md, with their tables of plotted numbers): a check, a why_not, a caption's notes, `render.gaps`
    or published numbers edited without a rerender would leave the kept tree, the README's headlines and the why_not
    tests below reading stale text (two paper-scale reasons were found so on 2026-12-05). The images are not drawn
    (style.save leaves empty files: PNG and PDF bytes are not stable across matplotlib builds)."""
    from xcbench.catalogue import load_datasets
    from xcbench.reporting import style
    from xcbench.reporting.rerender import rerender

    def save(fig, out):  # empty image files: the HTML page reads them, nothing here compares them
        style._pyplot().close(fig)
        paths = [Path(f"{out}.{ext}") for ext in ("png", "pdf")]
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"")
        return paths
    monkeypatch.setattr(style, "save", save)
    kept = ROOT / "reference" / scale / "figures"
    (tmp_path / "results").symlink_to(ROOT / "reference" / scale / "results")
    rerender(tmp_path, scale, load_datasets())
    made = [p.relative_to(tmp_path / "figures") for p in sorted((tmp_path / "figures").glob("*/*"))
            if p.name == "claims.json" or p.suffix == ".md" and p.name != "claims.md"]  # tables, captions, claims
    stale = [str(p) for p in made if not (kept / p).exists() or (tmp_path / "figures" / p).read_text() != (kept / p).read_text()]
    assert made and stale == [], f"rerender: python -m xcbench rerender --root reference/{scale} --scale {scale}"


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_every_why_not_explains_a_verdict_the_kept_tree_shows(scale):
    """A claim's `why_not: {scale: text}` is the measured reason it is not held at that scale. Where every row
    the kept tree renders for the claim is held, the text explains numbers that are gone (a retrained run
    flipped the verdict) and would come back, stale, beside the next "not held": rewrite it from today's runs
    or drop it (7 quick ones were found so on 2026-12-05). Claims the kept tree has no row for are not judged."""
    from xcbench.io import read_yaml
    kept, dead = kept_claim_rows(scale), []
    for f in sorted((ROOT / "config" / "claims").glob("*.yaml")):
        rows = kept.get(f.stem, [])
        for c in read_yaml(f)["claims"]:
            verdicts = [r["verdict"] for r in rows if r.get("id") == c["id"]]
            if scale in (c.get("why_not") or {}) and verdicts and all(v.startswith("held") for v in verdicts):
                dead.append(f"{f.stem}/{c['id']}")
    assert dead == []


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_every_claim_the_kept_tree_does_not_hold_says_why(scale):
    """A claim the kept tree renders as not held carries its measured reason (`why_not` at that scale), unless the
    verdict is the seeds'-noise rule, whose row states the margin and its noise: a number far from the paper's is a
    finding to explain. 19 quick rows had none before 2026-12-05 (and 12 more quoted numbers the kept runs no longer
    show: tests cannot read prose, so rewrite a claim's why_not whenever its runs are retrained). A `caveat` is no
    reason (it qualifies any verdict): until 2026-12-05 this test read the verdict's text, which a caveat also fills."""
    from xcbench.io import read_yaml

    bare = []
    for paper, rows in kept_claim_rows(scale).items():
        claims = {c["id"]: c for c in read_yaml(ROOT / "config" / "claims" / f"{paper}.yaml")["claims"]}
        for r in rows:  # the claim file's why_not, not the verdict's "(at the scale: ...)", which a caveat also fills
            v = r["verdict"]
            if v.startswith("not held") and "seeds' noise" not in v and scale not in claims[r["id"]].get("why_not", {}):
                bare.append(f"{paper}/{r['id']} on {r.get('dataset')}: {v[:60]}")
    assert bare == []


def test_every_paper_scale_gap_from_a_published_number_says_why():
    """A kept paper-scale table whose number stands more than 15% from the published one under the same column has
    `render.gaps` (the caption lists the gaps, then that text): never left silent. The text is checked to exist, not
    to be right; a new gap after a kept run changes names itself here."""
    from xcbench.reporting.collect import collect, for_rendering
    from xcbench.reporting.tables import published_gaps, table_rows

    results, silent = ROOT / "reference" / "paper" / "results", []
    for f in sorted((ROOT / "config" / "experiments").glob("*/*.yaml")):
        exp = for_rendering(f, "paper", results)
        if exp.get("render", {}).get("renderer") != "metric_table" or not exp["render"].get("literature"):
            continue
        header, rows, _, _, _, published = table_rows(exp, collect(results, exp))
        if (gaps := published_gaps(header, rows, published)) and not exp["render"].get("gaps"):
            silent.append(f"{f.parent.name}/{f.stem}: {gaps[:2]}")
    assert silent == []
