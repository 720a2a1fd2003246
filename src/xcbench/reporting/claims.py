"""Check a paper's qualitative claims against our cached results.

`config/claims/<paper>.yaml` lists claims of the form  left OP factor * right + offset, where each side is
{method, metric[, dataset]} (mean over seeds), or the paper's constant {value: x}. A claim without a dataset is
checked on every dataset its artifact uses at the current scale. Each row reports the paper's
number (as text, from the source), ours and a verdict: held / not held (", partial: no run of ..." when
a side's runs are only partly there, a method or some of the artifact's seeds: evaluated over those present) / not run (results missing) /
no data (every run is there and none reports the metric: a misspelt metric) / not at this scale (the claim's dataset,
or one of its methods, is not run by the artifact at this scale); a
dataset whose runs exist but do not report the claim's metric (a text column beside face metrics) gets no row. A side
may be {methods: [...], reduce: min|max} ("below every static sampler"; reporting/claim_values.py: a side's number,
seeds, runs of unequal length); a claim's `why_not:
{scale: text}` is printed beside a "not held" verdict at that scale (the measured reason), as
"not held (at the <scale> scale: text)"; a `caveat: {scale: text}` is printed so beside any verdict at that
scale (a held claim that turns on one run's last epoch). Rows of claims quoting the paper's abstract (`abstract:`)
and their twins are marked `headline` (`headline_ids`: the README's rows).
A claim with `beyond_seed_noise: true` (the paper's words: "by a large margin", "clearly") holds only when the
margin is larger than the seeds move it ("not testable: one seed", unless the means already fail).
A claim with `across: {gain: {left, right}, where: {artifact, method, metric, pick: min|max}}` compares
datasets instead: the largest relative gain left / right - 1 falls on the dataset `where` picks
(MIDX: "the sparsest dataset gains most"); it gets one row, dataset "all". A claim with
`sweep: {methods: [...], metric, op}` ("every sampler improves with m") holds when each method of the list OP the one
before it, step by step as compare claims. A claim may `require` setup checks
(`check: true`): on a dataset where one of them is not held, the claim is "not testable" there.
Runs of unequal length (one cut short by a time limit) are compared on `final.` metrics after the last epoch
all of them reached.
"""

from __future__ import annotations

from pathlib import Path

from xcbench.io import read_yaml, write_json, write_text
from xcbench.reporting import html as H
from xcbench.reporting.claim_table import bare_verdict, claims_markdown
from xcbench.reporting.claim_values import (
    OPS,
    REDUCE,
    at_epoch,
    beyond_seeds,
    claim_sides,
    comparison,
    cut_epoch,
    describe,
    later_counterexample,
    one_epoch,
    point_side,
    side_label,
    side_methods,
    side_value,
)
from xcbench.reporting.collect import collect, for_rendering
from xcbench.reporting.labels import caption_name, pretty
from xcbench.schema import validate


def _compare_rows(c: dict, exp: dict, recs: list[dict], scale: str, load) -> list[dict]:
    """left OP factor * right + offset, one row per dataset (or the claim's one dataset). Where a compared run
    was cut short before another's end, `final.` metrics are compared after the last epoch all of them reached,
    and a claim on other metrics (test numbers at each run's best epoch) says that the runs' lengths differ."""
    rows, claim = [], c
    datasets = [c["left"]["dataset"]] if "dataset" in c["left"] else exp["datasets"]
    for d in datasets:
        e = cut_epoch(claim, recs, d, exp)
        c = {**claim, "left": at_epoch(claim["left"], e), "right": at_epoch(claim["right"], e)} if e else claim
        # a side whose metric is not a per-epoch one (test numbers at the best epoch) still compares unequal runs
        unequal = e is not None and not all(s["metric"].startswith("final.") for s in (claim["left"], claim["right"])
                                            if "value" not in s)
        missing: list[str] = []
        lv, rv = side_value(c["left"], recs, d, missing, exp), side_value(c["right"], recs, d, missing, exp)
        factor, offset = float(c.get("factor", 1.0)), float(c.get("offset", 0.0))
        used = [m for side in (c["left"], c["right"]) for m in side_methods(side, exp)]
        if any(d not in (exp["methods"].get(m) or {}).get("datasets", [d]) for m in used):
            continue  # a method the experiment runs on other datasets only (a face sweep beside a text column)
        if d not in exp["datasets"] or any(m not in exp["methods"] for m in used):
            # a dataset or a method this scale does not run (a scale's `skip`)
            verdict, ours = "not at this scale", "–"
        elif lv is None or rv is None:
            if all(any(r["dataset"] == d and r["method"] == m for r in recs) for m in used):
                continue  # every run is there: the metric is not one this dataset reports (a text column)
            verdict, ours = "not run", "–"
        elif e == 0:
            verdict, ours = "not testable: a compared run was cut short inside its first epoch", "–"
        elif one_epoch(c, recs, d, exp):
            verdict, ours = "not testable: one epoch trained, so its first and final epochs are the same", "–"
        else:
            verdict = "held" if OPS[c["op"]](lv, factor * rv + offset) else "not held"
            noise = beyond_seeds(c, recs, d, exp) if c.get("beyond_seed_noise") and verdict == "held" else None
            if noise is not None:
                ok, how = noise
                verdict = ("not testable: one seed, no spread to compare the margin with" if ok is None
                           else "held" if ok else "not held: within the seeds' noise")
            gaps = ([f"no run of {', '.join(missing)}"] if missing else []) + \
                ([f"runs of unequal length, one cut short by a time limit (all reached epoch {e})"] if unequal else [])
            if gaps:  # evaluated over the runs present, or over runs of unequal length: say so
                verdict = f"{verdict}, partial: {'; '.join(gaps)}"
            ours = ((f"after epoch {e}, the last every run reached: " if e and not unequal else "") +
                    comparison(lv, c["op"], rv, factor, offset)
                    + (f"; {noise[1]}" if noise is not None and noise[0] is not None else ""))
            late = later_counterexample(claim, recs, d, exp, e) if e and not unequal else None
            if late is not None:  # refuted by two runs that went further than the rest
                at, m, lv2, rv2, cut = late
                who = f"{caption_name(exp, side_methods(claim['left'], exp)[0])} and {caption_name(exp, m)}"
                verdict = "not held" + (f", partial: no run of {', '.join(missing)}" if missing else "")
                ours = (f"after epoch {at}, the last {who} both reached: " if cut else f"{who} at their ends (epoch {at}): ") + \
                    comparison(lv2, c["op"], rv2, factor, offset) + f" ({ours})"
        rows.append(_row(c, d, ours, verdict, scale, f"{describe(c['left'], exp)} {c['op']} {describe(c['right'], exp)}"))
    return rows


def _across_rows(c: dict, exp: dict, recs: list[dict], scale: str, load) -> list[dict]:
    """'The gain is largest on the sparsest dataset': over the artifact's datasets, the one with the
    largest relative gain left / right - 1 must be the one that `where` picks (min or max of a metric
    of another artifact's runs, e.g. Table 6's density), and that gain must be positive (a 'largest gain'
    that is a loss is no benefit). One row; fewer than two datasets: not at this scale."""
    gain, where = c["across"]["gain"], c["across"]["where"]
    ref = load(where["artifact"])
    check = (f"argmax gain {describe(gain['left'], exp)} / {describe(gain['right'], exp)} - 1 "
             f"= arg{where['pick']} {where['metric']}")
    if len(exp["datasets"]) < 2:
        return [_row(c, "all", "–", "not at this scale", scale, check)]
    g, w = {}, {}
    for d in exp["datasets"]:
        lv, rv = side_value(gain["left"], recs, d, exp=exp), side_value(gain["right"], recs, d, exp=exp)
        wv = side_value({"method": where["method"], "metric": where["metric"]}, ref[1], d)
        if lv is None or rv is None or wv is None:
            return [_row(c, "all", "–", "not run", scale, check)]
        g[d], w[d] = lv / rv - 1, wv
    best, picked = max(g, key=g.get), REDUCE[where["pick"]](w, key=w.get)
    ours = "; ".join(f"{pretty(d)} {100 * g[d]:+.1f}% ({where['metric']} {w[d]:.4g})" for d in g)
    return [_row(c, "all", ours, "held" if best == picked and g[best] > 0 else "not held", scale, check)]


def _sweep_rows(c: dict, exp: dict, recs: list[dict], scale: str, load) -> list[dict]:
    """'All samplers perform better with an increased number of samples' (MIDX 6.2.5): along `sweep.methods`,
    ordered by the swept setting, each point's metric OP the one before it, as compare claims of each step (cut
    runs and seeds as there). A point is a method, or a pair [a, b] read as a / b, or with `gap: true` as |a / b - 1|
    ("the gap between learnable and fixed codebooks narrows as K grows": op <). Held when every step holds. The chain is the
    points the scale runs (the quick scale's skips leave its endpoints); one it runs without results leaves the chain
    and makes the row partial. `ours` lists each point's value at its `x` (its first method's; test numbers at each
    run's best epoch). One row per dataset."""
    s, bare = c["sweep"], {k: v for k, v in c.items() if k not in ("sweep", "why_not", "caveat", "headline")}
    side = {p if isinstance(p, str) else tuple(p): point_side(p, s) for p in s["methods"]}
    names_of = {p: side_methods(v, exp) for p, v in side.items()}
    chain = [p for p in side if all(m in exp["methods"] for m in names_of[p])]
    if len(chain) < 2:
        raw = [p if isinstance(p, str) else " / ".join(p) for p in side]
        check = f"{s['metric']} along {' → '.join(raw)}: each {s['op']} the one before"
        return [_row(c, d, "–", "not at this scale", scale, check) for d in exp["datasets"]]
    xs = [exp["methods"][names_of[p][0]].get("x") for p in chain]
    names = [side_label(side[chain[0]], exp)] + [str(x) if None not in xs else side_label(side[p], exp)
                                                 for x, p in zip(xs[1:], chain[1:])]
    check = f"{s['metric']} along {' → '.join(names)}: each {s['op']} the one before"
    rows = []
    for d in exp["datasets"]:
        have = {r["method"] for r in recs if r["dataset"] == d}
        ran = [p for p in chain if set(names_of[p]) <= have]
        if len(ran) < 2:
            rows.append(_row(c, d, "–", "not run", scale, check))
            continue
        steps = [r for a, b in zip(ran, ran[1:]) for r in _compare_rows(
            {**bare, "left": {**side[b], "dataset": d}, "op": s["op"], "right": {**side[a], "dataset": d}},
            exp, recs, scale, load)]
        if len(steps) < len(ran) - 1:
            continue  # a method the artifact runs on other datasets only, as a compare claim's row
        heads = [r["verdict"].split(", partial: ")[0] for r in steps]
        gaps = [g for r in steps for g in r["verdict"].split(", partial: ")[1:]]
        unran = [m for p in chain if p not in ran for m in names_of[p] if m not in have]
        gaps = list(dict.fromkeys(([f"no run of {', '.join(unran)}"] if unran else []) + gaps))
        verdict = ("not held" if any(h.startswith("not held") for h in heads) else
                   "held" if all(h == "held" for h in heads) else next(h for h in heads if h != "held"))
        ours = [f"{exp['methods'][names_of[p][0]].get('x', caption_name(exp, names_of[p][0]))}: "
                f"{side_value(side[p], recs, d, None, exp):.4g}"
                + (f" (not {s['op']} the one before)" if i and heads[i - 1].startswith("not held") else "")
                for i, p in enumerate(ran)]
        rows.append(_row(c, d, " → ".join(ours), verdict + (f", partial: {'; '.join(gaps)}" if gaps else ""), scale,
                         check))
    return rows


KINDS = {"compare": _compare_rows, "across": _across_rows, "sweep": _sweep_rows}


def _metrics(c: dict) -> str:
    return " / ".join(sorted({f"'{s['metric']}'" for s in claim_sides(c) if "metric" in s}))


def _row(c: dict, d: str, ours: str, verdict: str, scale: str, check: str) -> dict:
    # a partial 'not held' gets its reason too (below the best of several runs stays not held as runs arrive)
    why = c.get("why_not", {}).get(scale, "") if verdict.startswith("not held") else ""
    why = "; ".join(t for t in (why, c.get("caveat", {}).get(scale, "")) if t)
    return {"id": c["id"], "claim": c["text"], "dataset": d, "paper": c.get("paper", "–"), "ours": ours,
            "verdict": verdict + (f" (at the {scale} scale: {why})" if why else ""), "scale": scale, "check": check,
            **({"headline": True} if c.get("headline") else {}), **({"setup_check": True} if c.get("check") else {})}


def headline_ids(claims: list[dict]) -> set[str]:
    """The README's headline claims, by rule: every claim that encodes a sentence of the paper's abstract
    (`abstract:`), and the twins of those (a claim naming one in `twin:`, or named by one)."""
    ids = {c["id"] for c in claims if c.get("abstract")}
    return ids | {c["id"] for c in claims if c.get("twin") in ids} | {c["twin"] for c in claims if c["id"] in ids and c.get("twin")}


def evaluate_claims(claims_file: str | Path, experiments_dir: str | Path, results: str | Path,
                    scale: str, only: set[str] | None = None) -> dict:
    """`only`: check just the claims of these artifacts, and only where their runs are there (a kept
    results tree holding some of a paper's runs: rows whose runs it lacks are left out, not listed as
    'not run')."""
    spec = read_yaml(claims_file)
    validate(spec, "claims.schema.yaml", claims_file)
    cache: dict[str, tuple[dict, list[dict]]] = {}

    def load(artifact: str) -> tuple[dict, list[dict]]:
        if artifact not in cache:
            exp = for_rendering(Path(experiments_dir) / f"{artifact}.yaml", scale, results)
            cache[artifact] = exp, collect(results, exp)
        return cache[artifact]

    rows, headlines = [], headline_ids(spec["claims"])
    for c in spec["claims"]:
        if only is not None and c["artifact"] not in only:
            continue
        c = {**c, "headline": c["id"] in headlines}
        exp, recs = load(c["artifact"])
        new = KINDS[next((k for k in ("across", "sweep") if k in c), "compare")](c, exp, recs, scale, load)
        if not new:  # every run is there and none reports the metric: a misspelt metric must not vanish
            new = [_row(c, "all", "–", f"no data: no run reports {_metrics(c)}", scale, "")]
        rows += [r for r in new if only is None or bare_verdict(r["verdict"]) not in ("not run", "not at this scale")]
    return {"paper": spec["paper"], "title": spec.get("title", spec["paper"]), "scale": scale,
            "rows": requires_checks(spec["claims"], rows), "kept": only is not None}


def requires_checks(claims: list[dict], rows: list[dict]) -> list[dict]:
    """A claim that `requires` setup checks is not testable on a dataset where one of them is not held
    (MIDX Table 7's GRU4Rec rows on Sports, where GRU4Rec learnt item popularity only)."""
    needs = {c["id"]: c["requires"] for c in claims if c.get("requires")}
    failed = {(r["id"], r["dataset"]) for r in rows if r.get("setup_check") and r["verdict"].startswith("not held")}
    out = []
    for r in rows:
        bad = [k for k in needs.get(r["id"], []) if (k, r["dataset"]) in failed]
        out.append({**r, "verdict": f"not testable: setup check {', '.join(bad)} not held here"} if bad else r)
    return out


def write_claims(claims_file, experiments_dir, results, scale, out_md: str | Path, only: set[str] | None = None) -> dict:
    res = evaluate_claims(claims_file, experiments_dir, results, scale, only)
    write_json(Path(out_md).with_suffix(".json"), res)
    write_text(out_md, claims_markdown(res))
    write_text(Path(out_md).with_suffix(".html"), H.page(res["title"], H.markdown(claims_markdown(res))))
    return res
