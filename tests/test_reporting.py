"""Tables, figures, claims and the report rendered from a fake results tree."""

import numpy as np
import pytest

from xcbench.io import write_json, write_yaml
from xcbench.registry import RENDERERS
from xcbench.reporting.claims import evaluate_claims
from xcbench.reporting.collect import aggregate, collect
from xcbench.reporting.report import write_report
from xcbench.reporting.sweeps import sweep_points

EXP = {"paper": "p", "artifact": "t", "title": "T", "task": {"name": "xmc", "params": {}}, "scale": "quick",
       "render": {"kind": "table", "renderer": "metric_table", "metrics": ["P@1"], "percent": True},
       "datasets": ["d1", "d2"], "seeds": [0, 1], "methods": {"m1": {"head": "m1"}, "m2": {"head": "m2"}},
       "train": {"epochs": 2, "batch_size": 8, "lr": 0.1}}
VALUES = {("d1", "m1"): [0.5, 0.7], ("d1", "m2"): [0.4, 0.4], ("d2", "m1"): [0.2, 0.2]}  # d2/m2 missing


@pytest.fixture
def results(tmp_path):
    for (d, m), vals in VALUES.items():
        for s, v in enumerate(vals):
            write_json(tmp_path / "quick" / "p" / "t" / d / m / f"seed{s}" / "metrics.json",
                       {"metrics": {"P@1": v}, "curves": {"val_P@1": [v / 2, v]}, "wall_time_s": 1.0 + s})
    return tmp_path


def test_collect_and_aggregate(results):
    recs = collect(results, EXP)
    assert len(recs) == 6
    a = aggregate(recs, "d1", "m1", "P@1")
    assert a["mean"] == pytest.approx(0.6) and a["std"] == pytest.approx(0.1414213, rel=1e-5) and a["n"] == 2
    assert aggregate(recs, "d2", "m2", "P@1") is None
    assert aggregate(recs, "d1", "m1", "wall_time_s")["mean"] == pytest.approx(1.5)


def test_record_value_takes_the_first_key_a_run_reports():
    """`a|b`: a GPU run's device memory where it has one, else its resident peak; a missing key is skipped."""
    from xcbench.reporting.collect import record_value
    gpu = {"metrics": {}, "memory": {"cuda_max_allocated_bytes": 7, "peak_rss_bytes": 3}}
    cpu = {"metrics": {}, "memory": {"peak_rss_bytes": 3}}
    key = "memory.cuda_max_allocated_bytes|memory.peak_rss_bytes"
    assert record_value(gpu, key) == 7 and record_value(cpu, key) == 3
    assert record_value(cpu, "memory.nothing|memory.none") is None


def test_metric_table_outputs(results, tmp_path, catalogue):
    out = tmp_path / "fig" / "t"
    RENDERERS.get("metric_table")(EXP, str(results), str(out), catalogue)
    md = (tmp_path / "fig" / "t.md").read_text()
    assert "| m1 | 60.00 ± 14.14 | 20.00 ± 0.00 |" in md and "| m2 | 40.00 ± 0.00 | – |" in md
    assert "Scale: quick" in md and "Seeds: 0, 1" in md
    tex = (tmp_path / "fig" / "t.tex").read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"$\pm$" in tex
    csv = (tmp_path / "fig" / "t.csv").read_text().splitlines()
    assert csv[0] == "dataset,method,metric,mean,std,n_seeds" and len(csv) == 5


def test_curves_figure(results, tmp_path, catalogue):
    exp = {**EXP, "render": {"kind": "figure", "renderer": "curves", "curves": ["val_P@1"]}}
    paths = RENDERERS.get("curves")(exp, str(results), str(tmp_path / "f"), catalogue)
    assert {p.suffix for p in paths} == {".png", ".pdf", ".md", ".html"}
    png1 = (tmp_path / "f.png").read_bytes()
    RENDERERS.get("curves")(exp, str(results), str(tmp_path / "f"), catalogue)
    assert (tmp_path / "f.png").read_bytes() == png1  # byte-stable rerender
    assert png1[:8] == b"\x89PNG\r\n\x1a\n"


def test_metric_curves_caption_names_each_panels_curves(tmp_path, catalogue):
    """Figure 1's renderer: one panel per group, and the caption's table of values names the group of each
    curve (two groups both have a 'K = 1' line; the table must not leave them ambiguous)."""
    for s in (0, 1):
        write_json(tmp_path / "quick" / "p" / "t" / "d1" / "m1" / f"seed{s}" / "metrics.json",
                   {"metrics": {}, "curves": {"epoch": [0, 1, 2], "cp_1": [None, 0.5, 0.7 + 0.1 * s],
                                              "ncg_1": [None, 0.9, 0.8]}})
    exp = {**EXP, "datasets": ["d1"], "methods": {"m1": {"head": "m1"}},
           "render": {"kind": "figure", "renderer": "metric_curves",
                      "groups": [{"label": "average CP_K", "keys": ["cp_1"], "names": ["K = 1"]},
                                 {"label": "average NCG_K", "keys": ["ncg_1"], "names": ["K = 1"]}]}}
    RENDERERS.get("metric_curves")(exp, str(tmp_path), str(tmp_path / "f"), catalogue)
    md = (tmp_path / "f.caption.md").read_text()
    assert "| d1 | average CP_K, K = 1 | 0.5000, 0.7500 |" in md and "| d1 | average NCG_K, K = 1 | 0.9000, 0.8000 |" in md


def test_sweep_draws_the_baseline_run_as_a_line_and_lists_it(results, tmp_path, catalogue):
    """`render.baseline: m2` (a run with no x): listed under 'all' in the caption's table on each panel
    that has its run (d1: 0.4), absent where it has none (d2), and not a point of any series."""
    exp = {**EXP, "methods": {"m1": {"head": "m1", "x": 1}, "m2": {"head": "m2"}},
           "render": {"kind": "figure", "renderer": "sweep", "y": "P@1", "baseline": "m2"}}
    RENDERERS.get("sweep")(exp, str(results), str(tmp_path / "s"), catalogue)
    md = (tmp_path / "s.caption.md").read_text()
    assert "| d1 | m1 | 1 | 0.6 |" in md and "| d1 | m2 | all | 0.4 |" in md and "| d2 | m2 |" not in md
    assert "| d2 | m1 | 1 | 0.2 |" in md


def test_sweep_marks_a_point_whose_run_was_cut_short(tmp_path, catalogue):
    """A run cut short by a time limit is not final: its row in the caption's table says after which epoch
    (the earliest of its seeds), a whole run's row says nothing (the same point on another dataset's panel
    included), and the figure draws a ring on that point."""
    runs = {("d1", "m1", 0): 19, ("d1", "m1", 1): 23, ("d1", "m2", 0): None, ("d2", "m1", 0): None}
    for (d, m, s), e in runs.items():
        write_json(tmp_path / "quick" / "p" / "t" / d / m / f"seed{s}" / "metrics.json",
                   {"metrics": {"ppl": 150.0 if m == "m1" else 170.0}, **({"cut_short_after_epoch": e} if e else {})})
    exp = {**EXP, "datasets": ["d1", "d2"], "seeds": [0, 1],
           "methods": {"m1": {"head": "m1", "series": "S", "x": 100}, "m2": {"head": "m2", "series": "S", "x": 5}},
           "render": {"kind": "figure", "renderer": "sweep", "y": "ppl"}}
    RENDERERS.get("sweep")(exp, str(tmp_path), str(tmp_path / "s"), catalogue)
    md = (tmp_path / "s.caption.md").read_text()
    assert "| d1 | S | 100 | 150 (cut short after epoch 19: not final) |" in md and "| d1 | S | 5 | 170 |" in md
    assert "| d2 | S | 100 | 150 |" in md
    cut: dict = {}
    sweep_points(exp, collect(str(tmp_path), exp), [["d1"], ["d2"]], cut=cut)
    assert cut == {(("d1",), "S", 100.0): 19}


def test_sweep_spread_is_each_panels_own_seeds(tmp_path):
    """The seeds' error bar of a point belongs to its panel: the same series at the same x on two datasets'
    panels gets each dataset's own standard deviation, and a one-seed point gets none even when the other
    panel's point has several seeds."""
    runs = {("d1", "m1", 0): 1.0, ("d1", "m1", 1): 3.0, ("d2", "m1", 0): 10.0, ("d2", "m1", 1): 20.0,
            ("d1", "m2", 0): 5.0, ("d2", "m2", 0): 6.0, ("d2", "m2", 1): 8.0}
    for (d, m, s), v in runs.items():
        write_json(tmp_path / "quick" / "p" / "t" / d / m / f"seed{s}" / "metrics.json", {"metrics": {"ppl": v}})
    exp = {**EXP, "datasets": ["d1", "d2"], "seeds": [0, 1],
           "methods": {"m1": {"head": "m1", "series": "S", "x": 10}, "m2": {"head": "m2", "series": "S", "x": 5}},
           "render": {"kind": "figure", "renderer": "sweep", "y": "ppl"}}
    spread: dict = {}
    sweep_points(exp, collect(str(tmp_path), exp), [["d1"], ["d2"]], spread=spread)
    def std(a, b):
        return float(np.std([a, b], ddof=1))

    assert spread.keys() == {(("d1",), "S", 10.0), (("d2",), "S", 10.0), (("d2",), "S", 5.0)}
    assert spread[(("d1",), "S", 10.0)] == pytest.approx(std(1.0, 3.0))
    assert spread[(("d2",), "S", 10.0)] == pytest.approx(std(10.0, 20.0))


def test_sweep_by_device_never_joins_a_gpu_step_time_to_a_cpu_one(tmp_path, catalogue):
    """`render.by_device`: runs from two devices give one line per device, each point its own device's seed
    mean (seed 1 of m1 on the GPU is neither averaged into seed 0's CPU point nor on its line); one device
    keeps the plain series names."""
    runs = {("m1", 0): ("cpu", 100.0, 0.5), ("m1", 1): ("cuda", 10.0, 0.7), ("m2", 0): ("cpu", 50.0, 0.4)}
    for (m, s), (dev, ms, v) in runs.items():
        write_json(tmp_path / "quick" / "p" / "t" / "d1" / m / f"seed{s}" / "metrics.json",
                   {"metrics": {"P@1": v}, "final": {"step_ms": ms}, "device": dev})
    exp = {**EXP, "datasets": ["d1"], "methods": {"m1": {"head": "m1", "series": "S"}, "m2": {"head": "m2", "series": "S"}},
           "render": {"kind": "figure", "renderer": "sweep", "y": "P@1", "x_key": "final.step_ms", "by_device": True}}
    RENDERERS.get("sweep")(exp, str(tmp_path), str(tmp_path / "s"), catalogue)
    md = (tmp_path / "s.caption.md").read_text()
    assert "| d1 | S (cpu) | 50 | 0.4 |" in md and "| d1 | S (cpu) | 100 | 0.5 |" in md
    assert "| d1 | S (cuda) | 10 | 0.7 |" in md and "| 55 |" not in md
    RENDERERS.get("sweep")({**exp, "seeds": [0]}, str(tmp_path), str(tmp_path / "c"), catalogue)
    md = (tmp_path / "c.caption.md").read_text()
    assert "| d1 | S | 100 | 0.5 |" in md and "(cpu)" not in md


@pytest.mark.parametrize("render, panels", [({"renderer": "sweep", "y": "P@1"}, (0, 1)),
                                            ({"renderer": "curves", "curves": ["val_P@1"]}, (0, 1)),
                                            ({"renderer": "proposal_cdf"}, (0, 2))])  # panels: d1's first, d2's first
def test_a_method_keeps_its_colour_on_a_panel_that_lacks_an_earlier_method(tmp_path, catalogue, monkeypatch, render,
                                                                           panels):
    """The figure has one legend for every panel, so a method's line must look the same on each: m2 on d2,
    where m1 has no run, keeps m2's colour and marker from d1 (it once took m1's there: the styles followed
    the panel's own lines)."""
    from xcbench.reporting import style
    for d, m in (("d1", "m1"), ("d1", "m2"), ("d2", "m2")):
        write_json(tmp_path / "quick" / "p" / "t" / d / m / "seed0" / "metrics.json",
                   {"metrics": {"P@1": 0.5}, "curves": {"val_P@1": [0.1, 0.5]},
                    "head": {"cdf": {"ranks": [1, 2], **{st: {"sampler": [0.5, 1.0], "softmax": [0.6, 1.0]}
                                                        for st in ("first", "last")}}}})
    figs, save = [], style.save
    monkeypatch.setattr(style, "save", lambda fig, out: figs.append(fig) or save(fig, out))
    exp = {**EXP, "seeds": [0], "methods": {"m1": {"head": "m1", "x": 1}, "m2": {"head": "m2", "x": 2}},
           "render": {"kind": "figure", **render}}
    RENDERERS.get(render["renderer"])(exp, str(tmp_path), str(tmp_path / "f"), catalogue)
    ax1, ax2 = (figs[0].axes[i] for i in panels)
    look = [{ln.get_label(): (ln.get_color(), ln.get_marker()) for ln in ax.get_lines()} for ax in (ax1, ax2)]
    assert set(look[1]) == {"m2"} and look[1]["m2"] == look[0]["m2"] != look[0]["m1"]


def test_claims_verdicts(results, tmp_path):
    write_yaml(tmp_path / "exps" / "t.yaml", {k: v for k, v in EXP.items() if k != "scale"})
    claims = {"paper": "p", "claims": [
        {"id": "a", "text": "m1 beats m2", "artifact": "t", "left": {"method": "m1", "metric": "P@1"}, "op": ">",
         "right": {"method": "m2", "metric": "P@1"}, "paper": "1.0 vs 0.5"},
        {"id": "b", "text": "m1 above 1.6 m2", "artifact": "t", "left": {"method": "m1", "metric": "P@1", "dataset": "d1"},
         "op": ">", "right": {"method": "m2", "metric": "P@1", "dataset": "d1"}, "factor": 1.6},
        {"id": "c", "text": "m1 within 0.1 of 1.6 m2", "artifact": "t", "op": ">", "factor": 1.6, "offset": -0.1,
         "right": {"method": "m2", "metric": "P@1", "dataset": "d1"}, "left": {"method": "m1", "metric": "P@1", "dataset": "d1"}},
        {"id": "d", "text": "a method this scale does not run", "artifact": "t", "op": ">",
         "left": {"method": "m1", "metric": "P@1", "dataset": "d1"}, "right": {"methods": ["m2", "m9"], "metric": "P@1"}},
    ]}
    write_yaml(tmp_path / "c.yaml", claims)
    res = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", results, "quick")
    verdicts = [(r["id"], r["dataset"], r["verdict"]) for r in res["rows"]]
    assert verdicts == [("a", "d1", "held"), ("a", "d2", "not run"), ("b", "d1", "not held"), ("c", "d1", "held"),
                        ("d", "d1", "not at this scale")]
    assert res["rows"][-2]["ours"].endswith("> 1.6 × 0.4 - 0.1")
    kept = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", results, "quick", only={"t"})  # a kept tree
    assert [(r["id"], r["dataset"]) for r in kept["rows"]] == [("a", "d1"), ("b", "d1"), ("c", "d1")] and kept["kept"]


def test_report_gathers_claims_and_artifacts(tmp_path):
    write_json(tmp_path / "p" / "claims.json", {"paper": "p", "title": "P", "scale": "quick", "rows": [
        {"id": "a", "claim": "c", "dataset": "d", "paper": "1", "ours": "2", "verdict": "held", "scale": "quick",
         "check": "x"}]})
    (tmp_path / "p" / "t.md").write_text("| a |\n|---|\n| 1 |\n")
    write_report([tmp_path / "p" / "claims.json"], [tmp_path / "p" / "t.md", tmp_path / "p" / "f.png"],
                 tmp_path / "REPORT.md")
    rep = (tmp_path / "REPORT.md").read_text()
    assert "| p | c | d | 1 | 2 | quick | **held** |" in rep and "| a |" in rep and "![f](p/f.png)" in rep
    page = (tmp_path / "REPORT.html").read_text()
    assert "<td><strong>held</strong></td>" in page and "<th>a</th>" in page and "p/f.png is missing" in page


def test_bad_claims_file_is_rejected(tmp_path):
    from xcbench.config import ConfigError

    write_yaml(tmp_path / "c.yaml", {"paper": "p", "claims": [{"id": "a", "text": "t", "artifact": "t",
                                                                "left": {"value": 1}, "op": "==", "right": {"value": 1}}]})
    with pytest.raises(ConfigError, match="c.yaml"):
        evaluate_claims(tmp_path / "c.yaml", tmp_path, tmp_path, "quick")


def test_metric_table_literature_text_and_format_columns(results, tmp_path, catalogue):
    import copy

    exp = copy.deepcopy(EXP)
    exp["render"]["metrics"] = [{"key": "P@1", "format": ".1e"}, {"key": "note", "text": True}]
    exp["render"]["literature"] = [{"method": "Pub", "values": {"d1": {"P@1": 1.5}, "d2": {"P@1": 2.5}}},
                                   {"method": "Flat", "dataset": "big", "values": {"P@1": 9}},
                                   {"method": "Other", "values": {"big": {"P@1": 7}, "d1": {"P@1": 8}}}]
    for d, m, s in (("d1", "m1", 0), ("d1", "m1", 1)):
        p = results / "quick" / "p" / "t" / d / m / f"seed{s}" / "metrics.json"
        import json
        rec = json.loads(p.read_text())
        write_json(p, {**rec, "note": "cpu-x"})
    RENDERERS.get("metric_table")(exp, str(results), str(tmp_path / "t"), catalogue)
    md = (tmp_path / "t.md").read_text()
    assert "| m1 | 6.0e+01 ± 1.4e+01 | cpu-x | 2.0e+01 ± 0.0e+00 | – |" in md
    assert "| Pub (published) | 1.5 | – | 2.5 | – |" in md
    # numbers of datasets that are not columns here stand in a block of their own, never under d1 or d2
    assert "| Published | Dataset | P@1 | note |" in md and "| Flat (published) | big | 9 | – |" in md
    assert "| Other (published) | big | 7 | – |" in md and "| Other (published) | d1 | 8 | – |" in md
    assert "| Flat (published) | 9" not in md and "| Other (published) | 8" not in md
    tex = (tmp_path / "t.tex").read_text()
    assert tex.count(r"\begin{tabular}") == 2 and "Flat (published) & big & 9" in tex


def test_published_gaps_name_each_number_over_15_percent_from_ours():
    from xcbench.reporting.tables import published_gaps
    header = ["Method", "PTB PPL", "WT2 PPL"]
    rows = [["Full", "127.4 ± 0.3", "–"], ["Uniform", "170.1", "2,000.0"]]
    inline = [["Full (published)", "109.2", "123.3"], ["Uniform (published)", "160.0", "2,600"], ["Other (published)", "1", "1"]]
    assert published_gaps(header, rows, inline) == ["Full PTB PPL: 127.4 against 109.2 (+17%)",
                                                    "Uniform WT2 PPL: 2,000.0 against 2,600 (-23%)"]


def test_a_paper_scale_table_names_its_gaps_and_says_why(results, tmp_path, catalogue):
    """At the paper scale the caption lists every published number more than 15% from ours, then `render.gaps`
    (or says that no text explains them); other scales, whose settings are not the paper's, list none."""
    import copy
    import shutil

    exp = copy.deepcopy(EXP)
    exp["render"].update(percent=False, literature=[{"method": "m1", "values": {"d1": {"P@1": 0.5}, "d2": {"P@1": 0.19}}},
                                                    {"method": "m2", "values": {"d1": {"P@1": 0.2}, "big": {"P@1": 9}}}])
    RENDERERS.get("metric_table")(exp, str(results), str(tmp_path / "q"), catalogue)
    assert "published number" not in (tmp_path / "q.md").read_text()
    shutil.copytree(results / "quick", results / "paper")  # the same runs, read at the paper scale
    exp["scale"] = "paper"
    RENDERERS.get("metric_table")(exp, str(results), str(tmp_path / "p"), catalogue)
    md = (tmp_path / "p.md").read_text()  # d1: 0.60 against 0.5 is listed, d2: 0.20 against 0.19 (+5%) is not; m2's
    # entry stands in the block (its "big" is no column) and its d1 number is compared all the same
    assert ("More than 15% from the published number: m1 d1 P@1: 0.60 against 0.5 (+20%); m2 d1 P@1: 0.40 against 0.2 "
            "(+100%). No `render.gaps`") in md
    exp["render"]["gaps"] = "Why, measured."
    RENDERERS.get("metric_table")(exp, str(results), str(tmp_path / "p"), catalogue)
    assert "(+100%). Why, measured._" in (tmp_path / "p.md").read_text()


def test_footer_states_training_setup_only_for_trained_runs():
    from xcbench.reporting.captions import footer

    assert "Setup: adam lr 0.1, constant schedule, 2 epochs, batch 8." in footer(EXP, {})
    probe = {**EXP, "task": {"name": "loss_timing", "params": {}}, "notes": "timed"}
    assert "Setup" not in footer(probe, {}) and footer(probe, {}).endswith("timed")


def test_rerender_reference_tree_from_kept_results(tmp_path):
    """`xcbench rerender` renders the kept paper-scale RF-softmax tree from its results alone."""
    import shutil
    import subprocess
    import sys

    from conftest import REPO

    shutil.copytree(REPO / "reference" / "paper" / "results", tmp_path / "results")
    r = subprocess.run([sys.executable, "-m", "xcbench", "rerender", "--root", str(tmp_path), "--scale", "paper"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    for f in ("rff/table1.md", "rff/table2.html", "rff/claims.md", "REPORT.md", "REPORT.html"):
        assert (tmp_path / "figures" / f).stat().st_size > 0, f
    claims = (tmp_path / "figures" / "rff" / "claims.md").read_text()
    # only the claims of the artifacts this tree holds (Figure 3's Exp and Full: exp_close_to_full held); not held:
    # RFF time 2.3x > 2x, MSE gaps 45x < 100x and 6x < 3,200x, RFF above Quadratic on PTB (147.6 vs 139.7), and
    # T = 0.4 below T = 0.5 after epoch 10, every temperature of Figure 1 whole, and RF-softmax 28% above Exp
    assert "Scale: paper. 11/17 claims of the paper held (6 not held)." in claims
    assert "| 147.6 < 135.7 | **not held" in claims
    assert (tmp_path / "figures" / "rff" / "table1.md").read_text() == \
        (REPO / "reference" / "paper" / "figures" / "rff" / "table1.md").read_text()


def test_across_claim_gain_on_the_sparsest(tmp_path):
    """'Largest gain on the sparsest dataset': argmax of left/right - 1 over datasets vs argmin density."""
    base = {k: v for k, v in EXP.items() if k != "scale"}
    write_yaml(tmp_path / "exps" / "t.yaml", base)
    write_yaml(tmp_path / "exps" / "s.yaml", {**base, "artifact": "s", "seeds": [0], "methods": {"stats": {"head": "none"}}})
    gains = {"d1": (0.50, 0.40), "d2": (0.22, 0.20)}  # +25% on d1, +10% on d2
    for d, (m1, m2) in gains.items():
        for m, v in (("m1", m1), ("m2", m2)):
            write_json(tmp_path / "r" / "quick" / "p" / "t" / d / m / "seed0" / "metrics.json", {"metrics": {"P@1": v}})
    claim = {"id": "g", "text": "gain largest on the sparsest", "artifact": "t",
             "across": {"gain": {"left": {"method": "m1", "metric": "P@1"}, "right": {"method": "m2", "metric": "P@1"}},
                        "where": {"artifact": "s", "method": "stats", "metric": "density", "pick": "min"}}}
    write_yaml(tmp_path / "c.yaml", {"paper": "p", "claims": [claim]})

    def verdict(dens: dict) -> tuple[str, str]:
        for d, v in dens.items():
            write_json(tmp_path / "r" / "quick" / "p" / "s" / d / "stats" / "seed0" / "metrics.json",
                       {"metrics": {"density": v}})
        (row,) = evaluate_claims(tmp_path / "c.yaml", tmp_path / "exps", tmp_path / "r", "quick")["rows"]
        return row["verdict"], row["ours"]

    v, ours = verdict({"d1": 0.001, "d2": 0.01})
    assert v == "held" and "+25.0%" in ours and "+10.0%" in ours
    assert verdict({"d1": 0.01, "d2": 0.001})[0] == "not held"  # the sparsest (d2) gains less
    write_json(tmp_path / "r" / "quick" / "p" / "t" / "d1" / "m1" / "seed0" / "metrics.json", {"metrics": {"P@1": 0.39}})
    write_json(tmp_path / "r" / "quick" / "p" / "t" / "d2" / "m1" / "seed0" / "metrics.json", {"metrics": {"P@1": 0.15}})
    assert verdict({"d1": 0.001, "d2": 0.01})[0] == "not held"  # d1 loses least (-2.5%), but a loss is no gain
    write_yaml(tmp_path / "exps" / "t.yaml", {**base, "datasets": ["d1"]})
    assert verdict({"d1": 0.01})[0] == "not at this scale"


def test_kept_tree_renders_only_the_runs_it_holds(results):
    from xcbench.reporting.collect import with_runs_only

    recs = [r for r in collect(results, EXP) if r["method"] == "m1" and r["dataset"] == "d1"]
    exp = with_runs_only(EXP, recs)
    assert exp["datasets"] == ["d1"] and list(exp["methods"]) == ["m1"] and "kept results tree" in exp["notes"]
    assert with_runs_only(EXP, collect(results, EXP)) is EXP  # every dataset and method has a run


def test_captions_describe_the_settings_runs_had_and_their_status(tmp_path):
    """A kept tree re-renders with its runs' own config.resolved.yaml (lr 0.5 there, 0.1 in today's file),
    and the caption names the runs cut short and stopped early."""
    from xcbench.io import write_json, write_yaml
    from xcbench.reporting.captions import footer
    from xcbench.reporting.collect import collect
    exp = {"paper": "p", "artifact": "t", "title": "T", "scale": "paper", "datasets": ["d"], "seeds": [0],
           "task": {"name": "xmc", "params": {}}, "train": {"epochs": 10, "batch_size": 4, "lr": 0.1},
           "methods": {"a": {"label": "A", "head": "full_softmax"}, "b": {"label": "B", "head": "full_softmax"},
                       "c": {"label": "C", "head": "full_softmax"}}}
    for m, extra in (("a", {"cut_short_after_epoch": 3, "epochs": 3}), ("b", {"epochs": 6}), ("c", {"epochs": 10})):
        run = tmp_path / "paper" / "p" / "t" / "d" / m / "seed0"
        write_json(run / "metrics.json", {"metrics": {"P@1": 0.5}, **extra})
        write_yaml(run / "config.resolved.yaml", {"head": "full_softmax", "head_params": {},
                                                  "train": {"epochs": 10, "batch_size": 4, "lr": 0.5}, "model": {}})
    foot = footer(exp, {}, collect(tmp_path, exp))
    assert "Seeds: 0." in foot  # every planned seed shown
    assert "Seeds: 0, 1, 2 (runs shown: seed 0)." in footer({**exp, "seeds": [0, 1, 2]}, {}, collect(tmp_path, exp))
    assert "lr 0.5" in foot and "lr 0.1" not in foot
    assert "Cut short by the time limit (tested at the best epoch so far): A after epoch 3 of 10." in foot
    assert "Stopped early (no validation improvement): B at epoch 6 of 10." in foot and "C at" not in foot


def test_a_view_keeps_its_own_notes_beside_those_its_runs_were_made_under(tmp_path):
    """Class-selection Table 2 (runs_of: fig2) explains its memory and cost columns in its own notes; the
    caption gives the owner's notes its runs recorded, then the view's (they replaced each other before)."""
    from xcbench.config import load_experiment
    from xcbench.reporting.captions import footer
    d = tmp_path / "exps"
    write_yaml(d / "own.yaml", {**{k: v for k, v in EXP.items() if k != "scale"}, "artifact": "own",
                                "notes": "How the runs were made."})
    write_yaml(d / "view.yaml", {"paper": "p", "artifact": "view", "runs_of": "own", "title": "V",
                                 "render": {"kind": "table", "renderer": "metric_table"},
                                 "notes": "What the view's columns mean."})
    view = load_experiment(d / "view.yaml")
    foot = footer({**view, "scale": "quick"}, {})
    assert foot.endswith("How the runs were made. What the view's columns mean.")
    assert footer({**load_experiment(d / "own.yaml"), "scale": "quick"}, {}).endswith("How the runs were made.")


def test_a_run_cut_inside_an_epoch_is_named_with_the_fraction_done():
    from xcbench.reporting.captions import run_status
    exp = {"datasets": ["d"], "methods": {"full": {"label": "Full"}}}
    rec = {"dataset": "d", "method": "full", "cut_short_after_epoch": 0.47, "resolved": {"train": {"epochs": 30}}}
    assert run_status(exp, [rec]) == "Cut short by the time limit (tested at the best epoch so far): Full after 47% of epoch 1 of 30."


def test_the_seeds_of_a_run_cut_at_the_same_point_are_named_once():
    from xcbench.reporting.captions import run_status
    exp = {"datasets": ["d"], "seeds": [0, 1], "methods": {"full": {"label": "Full"}, "hf": {"label": "HF"}}}
    recs = [{"dataset": "d", "method": m, "seed": s, "cut_short_after_epoch": 1, "resolved": {"train": {"epochs": 30}}}
            for m, s in (("full", 0), ("full", 1), ("hf", 0))]
    assert run_status(exp, recs) == ("Cut short by the time limit (tested at the best epoch so far): "
                                     "Full after epoch 1 of 30 (seeds 0, 1), HF after epoch 1 of 30 (seed 0).")


@pytest.mark.parametrize("train, named", [({"epochs": 50, "select": {"patience": 10}}, True),
                                           ({"epochs": 50, "schedule": "plateau", "plateau": {"stop_patience": 4}}, True),
                                           ({"epochs": 50, "select": {"patience": 50}}, False),
                                           ({"epochs": 50}, False)])
def test_a_run_that_a_stop_rule_never_ended_is_named_as_still_improving(train, named):
    """Under a rule that could have stopped it (patience below its epochs), a run that ran them all was still
    gaining on validation: named with its best epoch. A run stopped by the rule, or with no such rule, is not."""
    from xcbench.reporting.captions import run_status
    exp = {"datasets": ["d"], "seeds": [0, 1], "methods": {"nce": {"label": "NCE"}, "full": {"label": "Full"}}}
    recs = [{"dataset": "d", "method": "nce", "seed": s, "epochs": 50, "best_epoch": 50, "resolved": {"train": train}}
            for s in (0, 1)] + [{"dataset": "d", "method": "full", "seed": 0, "epochs": 19, "best_epoch": 9,
                                 "resolved": {"train": train}}]
    text = run_status(exp, recs)
    assert ("Still improving when their epochs ran out" in text) is named
    assert ("NCE, best epoch 50 of 50 (seeds 0, 1)" in text) is named
    assert "Full at epoch 19 of 50 (seed 0)" in text and "Full, best" not in text


@pytest.mark.parametrize("lines, outside", [(2, False), (9, True)])
def test_legend_moves_outside_the_panels_when_it_would_cover_the_points(lines, outside):
    """Up to style.LEGEND_INSIDE lines each panel keeps its legend; beyond, one figure legend holds every
    label once (two panels sharing their series) and no panel has its own."""
    from xcbench.reporting import style

    fig, axes = style.figure(2)
    for ax in axes[0]:
        for j in range(lines):
            ax.plot([1, 10], [j, j + 1], label=f"s{j}")
    style.legend(fig, axes[0], lines)
    labels = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert labels == ([f"s{j}" for j in range(lines)] if outside else [])
    assert all((ax.get_legend() is None) == outside for ax in axes[0])


def test_a_long_title_wraps_to_the_panels_instead_of_widening_the_image(tmp_path):
    """A one-panel figure with a 120-character title: saved with the tight bounding box, the image stays about
    the panel's width (unwrapped it was 1,794 px against 930), and a short title stays on one line."""
    from PIL import Image

    from xcbench.reporting import style

    fig, axes = style.figure(1)
    axes[0][0].plot([0, 1], [0, 1])
    style.title(fig, "Learning rate per head for the face table: identification of unseen validation identities "
                     "after the last epoch (seed 0)")
    assert fig.get_suptitle().count("\n") >= 1
    (png, _) = style.save(fig, tmp_path / "f")
    width_in = Image.open(png).size[0] / 200  # savefig.dpi: 200
    assert width_in < 1.2 * 3.2, width_in
    fig, _ = style.figure(1)
    style.title(fig, "Figure 3: identification")
    assert fig.get_suptitle() == "Figure 3: identification"


@pytest.mark.parametrize("lo, hi, want", [(0.8, 8.0, ["1", "2", "5"]), (1.0, 1e4, ["1", "10", "100", "1000", "10000"])])
def test_log_axis_labels_plain_numbers(lo, hi, want):
    """Within a decade: 1, 2 and 5 times the powers of ten, as plain numbers (no 2 x 10^0 crowding 3 x 10^0);
    over several decades the powers of ten alone."""
    from xcbench.reporting import style

    fig, axes = style.figure(1)
    ax = axes[0][0]
    ax.plot([lo, hi], [0, 1])
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    style.log_ticks(ax, "x")
    fig.canvas.draw()
    shown = [t.get_text() for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)
             if t.get_text() and lo <= t.get_position()[0] <= hi]
    assert sorted(shown, key=float) == want


def test_a_sweeps_log_axis_ticks_at_its_grid(tmp_path, catalogue, monkeypatch):
    """K = 8, 32, 128 codewords: the ticks are the swept values, which 1-2-5 ticks (10, 20, 50, 100) would miss."""
    from xcbench.reporting import style

    for m, ppl in (("k8", 136.0), ("k32", 131.0), ("k128", 129.0)):
        write_json(tmp_path / "quick" / "p" / "t" / "d1" / m / "seed0" / "metrics.json", {"metrics": {"ppl": ppl}})
    exp = {**EXP, "datasets": ["d1"], "seeds": [0],
           "methods": {m: {"head": m, "series": "S", "x": int(m[1:])} for m in ("k8", "k32", "k128")},
           "render": {"kind": "figure", "renderer": "sweep", "y": "ppl"}}
    calls, draw = [], style.log_ticks
    monkeypatch.setattr(style, "log_ticks", lambda ax, axis="x", at=None: (calls.append((axis, at)), draw(ax, axis, at)))
    RENDERERS.get("sweep")(exp, str(tmp_path), str(tmp_path / "s"), catalogue)
    assert calls == [("x", [8.0, 32.0, 128.0])]
    fig, axes = style.figure(1)
    ax = axes[0][0]
    ax.plot([8, 32, 128], [0, 1, 2])
    ax.set_xscale("log")
    style.log_ticks(ax, "x", [8, 32, 128])
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True) if t.get_text()] == \
        ["8", "32", "128"]


def test_kept_runs_render_without_their_optional_library(monkeypatch):
    """A method whose library is missing here stays in a rendering when its runs are in the results tree
    (fig2's kept Annoy run), and is left out, named as not run, where they are not (quick scale: no runs)."""
    from conftest import REPO

    from xcbench import registry
    from xcbench.reporting.collect import collect, for_rendering

    real = registry.unavailable
    monkeypatch.setattr(registry, "unavailable", lambda methods: {
        **real(methods), **{m: "needs annoy" for m, s in methods.items() if s.get("params", {}).get("selector") == "annoy"}})
    f, kept = REPO / "config/experiments/class_selection/table1.yaml", REPO / "reference/paper/results"
    exp = for_rendering(f, "paper", kept)
    assert "annoy_1" in exp["methods"] and "annoy_1" not in exp.get("unavailable", {})
    assert any(r["method"] == "annoy_1" for r in collect(kept, exp))
    bare = for_rendering(f, "quick", kept)
    assert "annoy_1" not in bare["methods"] and "needs annoy" in bare["unavailable"]["annoy_1"]


def test_render_and_claims_jobs_never_import_torch(tmp_path):
    """A render or claims job reads JSON and draws: with every run of the paper's artifacts there, neither
    it nor its caption (encoder, schedule defaults, whether the task trains) imports torch (2.4 s of a 4-s
    job here). Fails when captions import the model, the tasks or torch's optimizers, or when a renderer
    lookup imports every registry's packages."""
    import subprocess
    import sys

    from conftest import REPO

    script = f"""
import json, sys
from pathlib import Path
from xcbench.config import load_experiment, resolve_experiment
from xcbench.io import write_yaml
from xcbench.run import expected_runs, run_dir
from xcbench.run import make_run
from xcbench.cli import main
R, O = {str(tmp_path / "results")!r}, {str(tmp_path / "fig")!r}
for f in sorted(Path("config/experiments/class_selection").glob("*.yaml")):
    exp = resolve_experiment(load_experiment(f), "tiny", check_libraries=False)
    for d, m, s in expected_runs(exp):
        p = run_dir(R, exp, d, m, s) / "metrics.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({{"metrics": {{"ident_top1": 0.5 + s / 10}}, "final": {{"step_ms": 3.0}}}}))
        write_yaml(p.with_name("config.resolved.yaml"), make_run(exp, d, m, s).spec)  # what a run records
main(["render", "--experiment", "config/experiments/class_selection/table2.yaml", "--scale", "tiny",
      "--results", R, "--out", O + "/table2"])
main(["render", "--experiment", "config/experiments/class_selection/fig2.yaml", "--scale", "tiny",
      "--results", R, "--out", O + "/fig2"])
main(["claims", "--claims", "config/claims/class_selection.yaml", "--experiments",
      "config/experiments/class_selection", "--scale", "tiny", "--results", R, "--out", O + "/claims.md"])
assert Path(O + "/fig2.png").exists() and Path(O + "/claims.md").exists()
assert "torch" not in sys.modules, "a render or claims job imported torch"
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_claims_markdown_counts_claims_apart_from_setup_checks():
    """held / not held / partial / not testable are counted over the paper's claims only; a not-held reason
    that mentions 'partial' does not make a row partial; checks of the setup get their own section."""
    from xcbench.reporting.claim_table import claims_markdown, verdict_counts

    row = lambda v, **kw: {"claim": "c", "dataset": "all", "check": "", "paper": "", "ours": "", "verdict": v, **kw}  # noqa: E731
    rows = [row("held"), row("not held (at the paper scale: a partial epoch)"), row("held, partial: no run of x"),
            row("not testable: one epoch trained, so its first and final epochs are the same"),
            row("not held", setup_check=True)]
    assert verdict_counts(rows[:4]) == {"held": 1, "not held": 1, "partial": 1, "not testable": 1, "not run": 0}
    md = claims_markdown({"title": "t", "scale": "paper", "rows": rows})
    assert "1/4 claims of the paper held (1 not held, 1 partial, 1 not testable)." in md
    assert md.index("## Checks of the setup") < md.rindex("**not held**")


def test_captions_name_the_machine_of_each_run():
    """One machine is named once; runs of one artifact on several machines: the machine of most runs is named
    once and the others' runs are listed by machine (a kept tree mixing a lent GPU's runs with CPU runs), methods
    sharing a label by their keys."""
    from xcbench.reporting.captions import machines

    exp = {"datasets": ["d"], "seeds": [0, 1], "methods": {"full": {"label": "Full"}, "a_u": {"label": "U"},
                                                            "b_u": {"label": "U"}}}
    rec = lambda m, s, dev: {"dataset": "d", "method": m, "seed": s, "device_name": dev}  # noqa: E731
    assert machines(exp, [rec("full", 0, "AMD EPYC (1 threads)")]) == "Ran on AMD EPYC (1 thread)."
    mixed = machines(exp, [rec("full", 0, "NVIDIA H100"), rec("full", 1, "AMD EPYC (1 threads)"),
                           rec("a_u", 0, "AMD EPYC (1 threads)"), rec("b_u", 1, "NVIDIA H100")])
    assert mixed == "Ran on AMD EPYC (1 thread), except Full (seed 0), b_u (seed 1) on NVIDIA H100."  # a tie: the first
    most = machines(exp, [rec("full", 0, "A"), rec("full", 1, "B"), rec("a_u", 0, "B"), rec("b_u", 1, "C")])
    assert most == "Ran on B, except Full (seed 0) on A; and b_u (seed 1) on C."
    grid = {"datasets": ["d"], "seeds": [0], "methods": {"n.lr1": {"label": "N, lr 1"}, "n.lr2": {"label": "N, lr 2"},
                                                           "f": {"label": "F"}}}
    assert machines(grid, [{"dataset": "d", "method": m, "seed": 0, "device_name": n} for m, n in
                           (("f", "A"), ("n.lr1", "B"), ("n.lr2", "B"), ("f", "A"))]) == "Ran on A, except N, lr 1; N, lr 2 on B."
    assert machines(exp, []) == ""


def test_front_table_says_which_methods_rest_on_fewer_seeds():
    """A front compares means: where one method has three seeds and the others one, the runs cell names it."""
    from xcbench.reporting.fronts import runs_cell
    assert runs_cell({"Full": 3, "MIDX": 3}) == "2 methods, 6 runs"
    assert runs_cell({"Full": 1, "MIDX-rq": 3, "Uniform": 1}) == "3 methods, 5 runs; MIDX-rq on 3 seeds, the others on 1"
    assert runs_cell({"a": 3, "b": 3, "c": 2}) == "3 methods, 8 runs; c on 2 seeds, the others on 3"


def test_pareto_front_keeps_the_undominated_methods_cheapest_first():
    """Hand-made points (accuracy, cost): b is dominated by a (less accurate, dearer), d by c (as accurate,
    dearer); e ties a exactly and stays; the front reads cheapest first."""
    from xcbench.reporting.fronts import pareto_front

    pts = {"a": (0.50, 10.0), "b": (0.45, 12.0), "c": (0.60, 20.0), "d": (0.60, 25.0), "e": (0.50, 10.0),
           "f": (0.70, 90.0)}
    assert pareto_front(pts) == ["a", "e", "c", "f"]
    assert pareto_front({"x": (0.1, 1.0)}) == ["x"] and pareto_front({}) == []
    # a loss (perplexity, better="min"): the same points with y negated give the same front
    assert pareto_front({k: (-y, c) for k, (y, c) in pts.items()}, better="min") == ["a", "e", "c", "f"]
    # by hand: p (ppl 200, 5 ms), q (150, 9), r (160, 9: dominated by q), s (300, 20: dominated by p)
    assert pareto_front({"p": (200, 5), "q": (150, 9), "r": (160, 9), "s": (300, 20)}, better="min") == ["p", "q"]


def test_a_claim_is_not_testable_where_a_setup_check_it_requires_is_not_held():
    """MIDX Table 7: GRU4Rec's claims require the check that GRU4Rec trains as in the paper; on the dataset where
    the check fails, each becomes 'not testable' whatever its verdict; elsewhere, and for claims without
    `requires`, verdicts stay."""
    from xcbench.reporting.claim_table import verdict_counts
    from xcbench.reporting.claims import requires_checks

    claims = [{"id": "gru_trains", "check": True}, {"id": "gru_rq_above", "requires": ["gru_trains"]}, {"id": "sas_rq_above"}]
    rows = [{"id": "gru_trains", "dataset": "sports", "verdict": "not held (at the paper scale: plateau)", "setup_check": True},
            {"id": "gru_trains", "dataset": "ml", "verdict": "held", "setup_check": True},
            {"id": "gru_rq_above", "dataset": "sports", "verdict": "held"},
            {"id": "gru_rq_above", "dataset": "ml", "verdict": "not held"},
            {"id": "sas_rq_above", "dataset": "sports", "verdict": "held"}]
    got = {(r["id"], r["dataset"]): r["verdict"] for r in requires_checks(claims, rows)}
    assert got["gru_rq_above", "sports"] == "not testable: setup check gru_trains not held here"
    assert got["gru_rq_above", "ml"] == "not held" and got["sas_rq_above", "sports"] == "held"
    assert got["gru_trains", "sports"].startswith("not held")
    counts = verdict_counts([r for r in requires_checks(claims, rows) if not r.get("setup_check")])
    assert counts["not testable"] == 1 and counts["held"] == 1 and counts["not held"] == 1


def test_captions_name_runs_of_a_shared_label_by_their_keys():
    """Two methods labelled alike (MIDX Table 7's Full of SASRec and of GRU4Rec): a caption's lists of settings,
    stops and machines name them by key, where one label would leave the reader to guess which row is meant."""
    from xcbench.reporting.captions import _grouped, machines, run_status

    exp = {"datasets": ["d"], "seeds": [0],
           "methods": {"sas_full": {"label": "Full"}, "gru_full": {"label": "Full"}, "m": {"label": "M"}}}
    assert _grouped({("d", "sas_full"): "0.001", ("d", "gru_full"): "0.01", ("d", "m"): "0.01"}, exp) == \
        "sas_full: 0.001; gru_full, M: 0.01"
    recs = [{"method": "gru_full", "dataset": "d", "seed": 0, "epochs": 5, "resolved": {"train": {"epochs": 12}}},
            {"method": "m", "dataset": "d", "seed": 0, "epochs": 5, "resolved": {"train": {"epochs": 12}}}]
    assert "Stopped early (no validation improvement): gru_full at epoch 5 of 12, M at epoch 5 of 12." in run_status(exp, recs)
    assert machines(exp, [{**r, "device_name": n} for r, n in zip(recs, ("A", "B"))]) == "Ran on A, except M on B."


def test_a_claims_check_column_names_sides_of_a_shared_label_by_their_keys():
    """MIDX Table 7's claims compare SASRec's or GRU4Rec's rows, labelled alike (`MIDX-rq`, `Uniform`): the
    check column names each side by key, so a reader can tell which encoder's runs a claim was computed on."""
    from xcbench.reporting.claim_values import describe

    exp = {"datasets": ["d"], "seeds": [0],
           "methods": {m: {"label": lab} for m, lab in (("sas_rq", "MIDX-rq"), ("gru_rq", "MIDX-rq"),
                                                          ("sas_uni", "Uniform"), ("gru_uni", "Uniform"), ("one", "One"))}}
    assert describe({"method": "sas_rq", "metric": "ndcg@50"}, exp) == "sas_rq ndcg@50"
    assert describe({"methods": ["gru_uni", "one"], "reduce": "max", "metric": "ndcg@50"}, exp) == "max(gru_uni, One) ndcg@50"


def test_curves_that_coincide_on_their_panel_are_named_by_their_share_of_its_height():
    """A curve within 1% of the panel's height (decades on a log axis) of another at every epoch is hidden by it:
    hand-computed cases on a log axis of 2 decades (1% = 0.02 decades) and a linear one of height 100; epochs
    outside the frame (a diverged run) and other epochs do not count."""
    import numpy as np

    from xcbench.reporting.figures import coincide

    def pairs(a, b, ylim=(1.0, 100.0), log=True, xb=(0, 1)):
        return coincide({"a": ((0, 1), np.array(a, float)), "b": (xb, np.array(b, float))}, ylim, log)

    assert pairs([10, 10], [10.4, 10.4]) == [("a", "b")]    # log10(1.04) = 0.017 decades < 0.02
    assert pairs([10, 10], [10, 11]) == []                   # log10(1.1) = 0.041 at the second epoch
    assert pairs([1.5, 1.5], [1.6, 1.6]) == []               # 0.028 decades (read linearly, 0.1 of 99 would pass)
    assert pairs([10, 1e6], [10.1, 1e7]) == [("a", "b")]     # the second epoch is above the frame for both
    assert pairs([10, 10], [10, 10], xb=(1, 2)) == []        # other epochs
    assert pairs([50, 20], [50.9, 20.5], ylim=(0, 100), log=False) == [("a", "b")]
    assert pairs([50, 20], [52, 20], ylim=(0, 100), log=False) == []
