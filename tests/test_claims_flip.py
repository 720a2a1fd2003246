"""Every comparison claim can fail: with made-up numbers that satisfy it the verdict is 'held', and moving
one number (the left side's) across the threshold turns it to 'not held'."""


import pytest
from conftest import REPO

from xcbench.config import SCALES, load_experiment, resolve_experiment
from xcbench.io import read_yaml
from xcbench.reporting.claim_values import per_seed, side_methods, side_value
from xcbench.reporting.claims import KINDS

CLAIMS = [(f.stem, c) for f in sorted((REPO / "config" / "claims").glob("*.yaml")) for c in read_yaml(f)["claims"]
          if "left" in c]


def _setting(paper: str, c: dict):
    """The first scale (and dataset) at which every method of the claim runs."""
    for scale in SCALES:
        exp = resolve_experiment(load_experiment(REPO / "config" / "experiments" / paper / f"{c['artifact']}.yaml"), scale)
        sides = [c["left"], c["right"]]
        names = [m for s in sides for m in side_methods(s, exp)]
        datasets = [s["dataset"] for s in sides if "dataset" in s] or exp["datasets"]
        if names and all(m in exp["methods"] for m in names) and all(d in exp["datasets"] for d in datasets):
            return exp, datasets
    return None, None


def _recs(c: dict, exp: dict, datasets: list[str], left: float, right: float) -> list[dict]:
    """Every method of a side at the side's value; a `ratios` side's a at it and its b at 1, so each a / b is it."""
    recs = []
    for side, v in ((c["left"], left), (c["right"], right)):
        value = {b: 1.0 for _, b in side.get("ratios", [])}
        for d in ([side["dataset"]] if "dataset" in side else datasets):
            recs += [{"dataset": d, "method": m, "seed": k, "metrics": {side["metric"]: value.get(m, v)}}
                     for m in side_methods(side, exp) for k in exp["seeds"]]  # as collect reads them: every seed
    return recs


@pytest.mark.parametrize("paper,claim", CLAIMS, ids=[f"{p}-{c['id']}" for p, c in CLAIMS])
def test_each_claim_flips_when_one_number_crosses_its_threshold(paper, claim):
    exp, datasets = _setting(paper, claim)
    if exp is None:
        pytest.skip("its methods run together at no scale")
    factor, offset = float(claim.get("factor", 1.0)), float(claim.get("offset", 0.0))
    right = float(claim["right"].get("value", 10.0))  # a constant side is the paper's number
    bound = factor * right + offset
    below = claim["op"] in ("<", "<=")
    good, bad = (bound - abs(bound) * 0.5 - 1, bound + abs(bound) * 0.5 + 1) if below else \
        (bound + abs(bound) * 0.5 + 1, bound - abs(bound) * 0.5 - 1)
    verdicts = []
    for left in (good, bad):
        rows = KINDS["compare"](claim, exp, _recs(claim, exp, datasets, left, right), exp["scale"], None)
        verdicts.append({r["verdict"].split(" (")[0].split(":")[0] for r in rows if r["dataset"] in datasets})
    one_seed = claim.get("beyond_seed_noise") and len(exp["seeds"]) < 2  # a margin with no spread to weigh it by
    assert verdicts == [{"not testable" if one_seed else "held"}, {"not held"}], verdicts


def test_a_large_margin_claim_holds_only_beyond_the_seeds_noise():
    """`beyond_seed_noise`: paired over seeds, every difference of the claimed sign and the mean beyond two
    standard errors; one seed cannot say; means that fail stay 'not held'."""
    c = {"id": "x", "text": "t", "artifact": "a", "left": {"method": "hf", "metric": "acc"}, "op": ">",
         "right": {"methods": ["r", "p"], "metric": "acc", "reduce": "max"}, "beyond_seed_noise": True}
    exp = {"datasets": ["d"], "seeds": [0, 1, 2], "methods": {"hf": {}, "r": {}, "p": {}}}

    def verdict(hf, r, p):
        recs = [{"dataset": "d", "method": m, "seed": k, "metrics": {"acc": v}}
                for m, vals in (("hf", hf), ("r", r), ("p", p)) for k, v in enumerate(vals)]
        return KINDS["compare"](c, exp, recs, "paper", None)[0]["verdict"]

    assert verdict([0.70, 0.71, 0.70], [0.65, 0.66, 0.64], [0.60, 0.61, 0.60]) == "held"
    assert verdict([0.7025, 0.710, 0.703], [0.692, 0.7105, 0.70], [0.70, 0.70, 0.70]).startswith("not held: within")
    assert verdict([0.701, 0.72, 0.701], [0.70, 0.70, 0.70], [0.60, 0.60, 0.60]).startswith("not held: within")  # < 2 SE
    assert verdict([0.70], [0.65], [0.60]).startswith("not testable: one seed")
    assert verdict([0.60, 0.60, 0.60], [0.65, 0.66, 0.64], [0.6, 0.6, 0.6]) == "not held"


def test_a_first_vs_final_claim_on_one_epoch_runs_is_not_testable():
    """'CP_10 grows over training' compares epoch 1 with the last; a run of one epoch cannot say either way."""
    paper, claim = next((p, c) for p, c in CLAIMS if c["left"]["metric"].startswith(("first.", "final."))
                        and c["right"]["metric"].startswith("first."))
    exp, datasets = _setting(paper, claim)
    for epochs, want in ((1, "not testable"), (3, "held")):
        recs = _recs(claim, exp, datasets, 2.0, 1.0) if claim["op"] in (">", ">=") else _recs(claim, exp, datasets, 1.0, 2.0)
        for r in recs:
            r["epochs"] = epochs
        rows = KINDS["compare"](claim, exp, recs, exp["scale"], None)
        assert {r["verdict"].split(":")[0].split(" (")[0] for r in rows if r["dataset"] in datasets} == {want}


@pytest.mark.parametrize("paper,claim", [(p, c) for p, c in CLAIMS if "paper_ratio" in c],
                         ids=[f"{p}-{c['id']}" for p, c in CLAIMS if "paper_ratio" in c])
def test_no_threshold_is_looser_than_the_papers_number_by_more_than_it_states(paper, claim):
    """A claim recording the paper's own ratio (`paper_ratio`, left / right) may not ask for less than that
    ratio divided by its stated `tolerance`: factor <= paper_ratio x tolerance for < and <=, factor >=
    paper_ratio / tolerance for > and >=."""
    bound, f = claim["paper_ratio"], claim["factor"]
    if claim["op"] in ("<", "<="):
        assert f <= bound * claim["tolerance"], f"{claim['id']}: factor {f} looser than {bound} x {claim['tolerance']}"
    else:
        assert f >= bound / claim["tolerance"], f"{claim['id']}: factor {f} looser than {bound} / {claim['tolerance']}"


ALL = [(f.stem, c) for f in sorted((REPO / "config" / "claims").glob("*.yaml")) for c in read_yaml(f)["claims"]]


@pytest.mark.parametrize("paper,claim", ALL, ids=[f"{p}-{c['id']}" for p, c in ALL])
def test_every_claim_quotes_what_of_its_paper_it_encodes(paper, claim):
    """A claim names the paper's words or numbers it encodes: a sentence of the abstract (`abstract`), another
    sentence (`quote`) or the table cells / figure values (`paper`), so a reader can check the encoding."""
    said = [claim.get(k) for k in ("abstract", "quote", "paper")]
    assert any(isinstance(s, str) and s.strip() for s in said), f"{paper}/{claim['id']}: add abstract, quote or paper"


def test_a_run_cut_short_is_compared_with_a_finished_one_at_the_epoch_both_reached():
    """A kept run cut by a time limit (epoch 4 of 10) beside a finished one: `final.` metrics are read after epoch 4
    for both, where the finished run's end would flatter it; a test metric (each run's best epoch) is compared but
    marked partial, as runs of unequal length."""
    exp = {"datasets": ["d"], "seeds": [0], "methods": {"a": {}, "b": {}}}
    curve_a, curve_b = [300.0, 200.0, 180.0, 170.0, 165.0, 150.0, 140.0], [300.0, 190.0, 170.0, 160.0, 155.0]
    recs = [{"dataset": "d", "method": "a", "seed": 0, "epochs": 6, "metrics": {"ppl": 139.0, "ndcg@50": 0.3},
             "final": {"val_ppl": curve_a[-1]}, "curves": {"epoch": list(range(7)), "val_ppl": curve_a}},
            {"dataset": "d", "method": "b", "seed": 0, "epochs": 4, "cut_short_after_epoch": 4,
             "metrics": {"ppl": 154.0, "ndcg@50": 0.2},
             "final": {"val_ppl": curve_b[-1]}, "curves": {"epoch": list(range(5)), "val_ppl": curve_b}}]

    def row(metric):
        c = {"id": "x", "text": "t", "artifact": "f", "op": "<", "left": {"method": "a", "metric": metric},
             "right": {"method": "b", "metric": metric}}
        return KINDS["compare"](c, exp, recs, "paper", None)[0]

    r = row("final.val_ppl")  # at their ends 150 < 155 would hold; after epoch 4, 165 vs 155 does not
    assert r["verdict"] == "not held" and r["ours"].startswith("after epoch 4, the last every run reached: 165 < 155")
    assert "val_ppl at epoch 4" in r["check"]
    assert row("ppl")["verdict"] == "held, partial: runs of unequal length, one cut short by a time limit (all reached epoch 4)"
    assert row("ndcg@50")["ours"] == "0.3 < 0.2"  # a metric named with '@' is no epoch
    mixed = {"id": "x", "text": "t", "artifact": "f", "op": "<", "left": {"method": "a", "metric": "final.val_ppl"},
             "right": {"method": "b", "metric": "ppl"}}  # one side read after epoch 4, the other at its best epoch
    assert KINDS["compare"](mixed, exp, recs, "paper", None)[0]["verdict"] == \
        "not held, partial: runs of unequal length, one cut short by a time limit (all reached epoch 4)"
    recs[1].update(epochs=0, cut_short_after_epoch=0.5)  # cut inside its first epoch: nothing trained to compare
    assert row("final.val_ppl")["verdict"].startswith("not testable") and row("ppl")["verdict"].startswith("not testable")
    recs[1].update(epochs=4)
    recs[1].pop("cut_short_after_epoch")  # stopped early by its own rule (no improvement): its end is its result
    assert row("final.val_ppl")["verdict"] == "held" and row("ppl")["verdict"] == "held"


def test_a_claim_against_every_other_run_is_refuted_by_two_runs_that_went_further():
    """'T = 0.5 below every other temperature' with T = 0.3 cut after epoch 4: compared after epoch 4 it holds,
    but T = 0.4, trained the whole 6 epochs as T = 0.5 was, ends below it: not held, at their ends."""
    exp = {"datasets": ["d"], "seeds": [0], "methods": {"t05": {"label": "T = 0.5"}, "t04": {"label": "T = 0.4"},
                                                         "t03": {"label": "T = 0.3"}}}

    def rec(m, curve, cut=False):
        return {"dataset": "d", "method": m, "seed": 0, "epochs": len(curve) - 1, "metrics": {},
                "final": {"val_ppl": curve[-1]}, "curves": {"epoch": list(range(len(curve))), "val_ppl": curve},
                **({"cut_short_after_epoch": len(curve) - 1} if cut else {})}
    t05, t03 = [400.0, 250.0, 200.0, 180.0, 172.0, 160.0, 150.0], [400.0, 300.0, 250.0, 220.0, 200.0]
    claim = {"id": "x", "text": "t", "artifact": "f", "op": "<", "left": {"method": "t05", "metric": "final.val_ppl"},
             "right": {"methods": ["t03", "t04"], "reduce": "min", "metric": "final.val_ppl"}}

    def row(t04, cut04=False):
        return KINDS["compare"](claim, exp, [rec("t05", t05), rec("t03", t03, cut=True), rec("t04", t04, cut04)],
                                "paper", None)[0]
    ahead = [400.0, 260.0, 210.0, 190.0, 175.0, 155.0, 145.0]  # behind T = 0.5 at epoch 4, ahead at epoch 6
    r = row(ahead)
    assert r["verdict"] == "not held" and r["ours"] == \
        "T = 0.5 and T = 0.4 at their ends (epoch 6): 150 < 145 (after epoch 4, the last every run reached: 172 < 175)"
    r = row(ahead[:6], cut04=True)  # T = 0.4 cut after epoch 5, ahead there: compared after epoch 5
    assert r["verdict"] == "not held" and r["ours"].startswith("after epoch 5, the last T = 0.5 and T = 0.4 both reached: 160 < 155")
    behind = [400.0, 260.0, 210.0, 190.0, 175.0, 165.0, 155.0]  # behind at every epoch: the epoch-4 verdict stands
    assert row(behind)["verdict"] == "held" and row(behind)["ours"] == "after epoch 4, the last every run reached: 172 < 175"
    worse_early = [400.0, 240.0, 190.0, 170.0, 170.0, 165.0, 155.0]  # ahead at epoch 4 only: refuted there already
    assert row(worse_early)["ours"] == "after epoch 4, the last every run reached: 172 < 170"


def test_a_constant_side_is_the_papers_number_for_every_seed():
    """`right: {value: 5}` ("a log-perplexity smaller than 5"): the verdict turns on the worst of the named runs
    against 5, the row shows the constant, a margin claim pairs every seed with it, and the schema refuses a
    constant that also names a run."""
    from xcbench.schema import ConfigError, validate

    c = {"id": "x", "text": "t", "artifact": "a", "op": "<", "right": {"value": 5.0},
         "left": {"methods": ["p", "r"], "reduce": "max", "metric": "nll"}}
    exp = {"datasets": ["d"], "seeds": [0, 1], "methods": {"p": {}, "r": {}}}

    def row(p, r, claim=c):
        recs = [{"dataset": "d", "method": m, "seed": k, "metrics": {"nll": v}}
                for m, vals in (("p", p), ("r", r)) for k, v in enumerate(vals)]
        return KINDS["compare"](claim, exp, recs, "paper", None)[0]

    held = row([4.9, 4.9], [4.8, 4.8])
    assert held["verdict"] == "held" and held["ours"] == "4.9 < 5" and held["check"] == "max(p, r) nll < 5"
    assert row([5.1, 5.1], [4.8, 4.8])["verdict"] == "not held"  # the worst of the two decides
    assert row([4.9, 4.9], [4.8, 4.8], {**c, "offset": -0.2})["verdict"] == "not held"  # 4.9 < 5 - 0.2 fails
    margin = {**c, "beyond_seed_noise": True}
    assert row([4.90, 4.91], [4.8, 4.8], margin)["verdict"] == "held"
    assert row([4.99, 4.90], [4.8, 4.8], margin)["verdict"].startswith("not held: within")
    validate({"paper": "x", "claims": [c]}, "claims.schema.yaml", "c.yaml")
    for bad in ({"value": 5.0, "method": "p"}, {"value": 5.0, "metric": "nll"}):
        with pytest.raises(ConfigError):
            validate({"paper": "x", "claims": [{**c, "right": bad}]}, "claims.schema.yaml", "c.yaml")


SWEEPS = [(f.stem, c) for f in sorted((REPO / "config" / "claims").glob("*.yaml")) for c in read_yaml(f)["claims"]
          if "sweep" in c]


def _sweep_recs(exp: dict, values: dict[str, float], metric: str) -> list[dict]:
    return [{"dataset": d, "method": m, "seed": k, "metrics": {metric: v}}
            for d in exp["datasets"] for m, v in values.items() for k in exp["seeds"]]


def test_a_sweep_claim_holds_only_when_every_step_does():
    """'Every sampler improves with m': a rise at one inner step is not held though the ends hold; a method without
    runs leaves the chain (partial), one the scale does not run leaves it silently; under two left: not at this scale."""
    c = {"id": "x", "text": "t", "artifact": "a", "sweep": {"methods": ["m5", "m10", "m20"], "metric": "ppl", "op": "<"}}
    exp = {"datasets": ["d"], "seeds": [0], "methods": {m: {"x": int(m[1:])} for m in ("m5", "m10", "m20")}}

    def row(values, methods=None):
        e = {**exp, "methods": {m: exp["methods"][m] for m in (methods or exp["methods"])}}
        return KINDS["sweep"](c, e, _sweep_recs(e, values, "ppl"), "paper", None)[0]

    assert row({"m5": 3.0, "m10": 2.0, "m20": 1.0})["verdict"] == "held"
    r = row({"m5": 3.0, "m10": 4.0, "m20": 1.0})  # the ends hold (1 < 3), the first step rises
    assert r["verdict"] == "not held" and r["ours"] == "5: 3 → 10: 4 (not < the one before) → 20: 1"
    assert row({"m5": 3.0, "m10": 2.0, "m20": 2.0})["verdict"] == "not held"  # a flat step is no fall
    assert row({"m5": 3.0, "m20": 1.0})["verdict"] == "held, partial: no run of m10"
    assert row({"m5": 3.0, "m20": 1.0}, ["m5", "m20"])["verdict"] == "held"  # the scale skips m10
    assert row({"m5": 3.0}, ["m5"])["verdict"] == "not at this scale"
    assert KINDS["sweep"](c, {**exp, "methods": {"other": {}}}, [], "tiny", None)[0]["verdict"] == "not at this scale"
    assert row({"m5": 3.0})["verdict"] == "not run"


def test_a_pair_point_reads_a_ratio_and_a_ratios_side_its_reduction():
    """`[a, b]` in a sweep is a / b ("the gap narrows as K grows": learnable / fixed rises); a `ratios` side is the
    min / max over its pairs of the seed means' ratio, per seed in `per_seed`; a pair with a run missing drops out."""
    from xcbench.schema import ConfigError, validate

    c = {"id": "x", "text": "t", "artifact": "a",
         "sweep": {"methods": [["l8", "f8"], ["l32", "f32"], ["l128", "f128"]], "metric": "ppl", "op": ">"}}
    exp = {"datasets": ["d"], "seeds": [0, 1], "methods": {m: {"x": int(m[1:])} for m in
                                                           ("l8", "f8", "l32", "f32", "l128", "f128")}}
    vals = {"l8": 120.0, "f8": 150.0, "l32": 130.0, "f32": 140.0, "l128": 128.0, "f128": 129.0}  # 0.8, 0.929, 0.992
    r = KINDS["sweep"](c, exp, _sweep_recs(exp, vals, "ppl"), "paper", None)[0]
    assert r["verdict"] == "held" and r["ours"] == "8: 0.8 → 32: 0.9286 → 128: 0.9922", r
    turned = {**vals, "f32": 131.0}  # 130 / 131 = 0.99237, above 128 / 129 = 0.99225: the step to 128 falls
    assert KINDS["sweep"](c, exp, _sweep_recs(exp, turned, "ppl"), "paper", None)[0]["verdict"] == "not held"
    gap = {**c, "sweep": {**c["sweep"], "op": "<", "gap": True}}  # |0.8 - 1| = 0.2 → 0.071 → 0.0078: narrows
    r = KINDS["sweep"](gap, exp, _sweep_recs(exp, vals, "ppl"), "paper", None)[0]
    assert r["verdict"] == "held" and r["ours"] == "8: 0.2 → 32: 0.07143 → 128: 0.007752", r
    behind = {**vals, "l32": 160.0}  # the learnable codebooks fall behind by more than they led: 0.2 → 0.143 → 0.0078
    assert KINDS["sweep"](gap, exp, _sweep_recs(exp, behind, "ppl"), "paper", None)[0]["verdict"] == "held"
    widening = {**vals, "l128": 140.0}  # 0.2 → 0.071 → |140 / 129 - 1| = 0.085: widens behind
    assert KINDS["sweep"](gap, exp, _sweep_recs(exp, widening, "ppl"), "paper", None)[0]["verdict"] == "not held"
    assert KINDS["sweep"](c, exp, _sweep_recs(exp, widening, "ppl"), "paper", None)[0]["verdict"] == "held"  # a / b rises
    partial = _sweep_recs(exp, {k: v for k, v in vals.items() if k != "f32"}, "ppl")
    assert KINDS["sweep"](c, exp, partial, "paper", None)[0]["verdict"] == "held, partial: no run of f32"
    side = {"ratios": [["l8", "f8"], ["l32", "f32"]], "reduce": "max", "metric": "ppl"}
    recs = _sweep_recs(exp, vals, "ppl") + [{"dataset": "d", "method": "l8", "seed": 2, "metrics": {"ppl": 999.0}}]
    missing: list[str] = []
    assert side_value(side, recs, "d", missing, exp) == pytest.approx(max((120 + 120 + 999) / 3 / 150, 130 / 140))
    assert per_seed(side, recs, "d", exp) == pytest.approx({0: 130 / 140, 1: 130 / 140})  # seed 2 lacks f8, l32, f32
    assert side_value({**side, "reduce": "min"}, [r for r in recs if r["method"] != "f8"], "d", None, exp) == \
        pytest.approx(130 / 140)
    validate({"paper": "x", "claims": [c, {"id": "y", "text": "t", "artifact": "a", "left": side, "op": ">",
                                            "right": {"method": "l8", "metric": "ppl"}}]}, "claims.schema.yaml", "c.yaml")
    with pytest.raises(ConfigError):  # a pair of three
        validate({"paper": "x", "claims": [{**c, "sweep": {**c["sweep"], "methods": [["a", "b", "c"], "d"]}}]},
                 "claims.schema.yaml", "c.yaml")


@pytest.mark.parametrize("paper,claim", SWEEPS, ids=[f"{p}-{c['id']}" for p, c in SWEEPS])
def test_each_sweep_claim_flips_when_one_inner_step_turns(paper, claim):
    """At the paper scale, where every point of the sweep runs: values that move the claimed way at every step hold;
    swapping two neighbours in the middle of the chain turns the verdict. A pair point [a, b] moves through a, its
    b held at 100."""
    exp = resolve_experiment(load_experiment(REPO / "config" / "experiments" / paper / f"{claim['artifact']}.yaml"), "paper")
    points = [[p] if isinstance(p, str) else p for p in claim["sweep"]["methods"]]
    assert all(m in exp["methods"] for p in points for m in p) and len(points) >= 3, "every point runs at the paper scale"
    step = -1.0 if claim["sweep"]["op"] in ("<", "<=") else 1.0
    lift = len(points) if claim["sweep"].get("gap") else 0  # |a / 100 - 1| moves as a / 100 does when a > 100
    good = {**{p[1]: 100.0 for p in points if len(p) == 2},
            **{p[0]: 100.0 + step * i + lift * (len(p) == 2) for i, p in enumerate(points)}}
    bad = {**good, points[1][0]: good[points[2][0]], points[2][0]: good[points[1][0]]}
    verdicts = [{r["verdict"].split(" (at the ")[0] for r in KINDS["sweep"](claim, exp, _sweep_recs(exp, v, claim["sweep"]["metric"]),
                                                                       "paper", None)} for v in (good, bad)]
    assert verdicts == [{"held"}, {"not held"}], verdicts
