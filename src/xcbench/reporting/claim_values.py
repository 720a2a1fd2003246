"""The two sides of a claim as numbers: which runs a side names, its value over their seeds, and how runs of
unequal length are compared (reporting/claims.py turns these into rows and verdicts).

A side is {method | methods | tagged | ratios, metric[, dataset][, reduce: min|max]}: its value is the mean over seeds
of one method's metric, or the min / max of several methods' means ("below every static sampler" = below their minimum),
over the runs present (the absent ones are reported, and the row is then partial). `ratios: [[a, b], ...]` reads each
pair's mean a / mean b ("Sphere gains the most from more samples": its m = 5 / m = 100 against the others'), with
`gap: true` its distance |a / b - 1| ("the gap between learnable and fixed codebooks narrows as K grows"), reduced over
the pairs present.
`beyond_seed_noise` ("by a large margin", "clearly"): the per-seed differences left_s - (factor * right_s + offset),
paired over the seeds both sides ran, must all have the claimed sign and their mean must exceed twice its standard
error; with one seed there is no spread to compare with.
Runs of unequal length (one cut short by a time limit) are compared on `final.` metrics after the last epoch all of
them reached (`cut_epoch`, `at_epoch`); a claim against every method of a side ("below every other temperature") is
also refuted by one pair that went further than that epoch (`later_counterexample`).
"""

from __future__ import annotations

import math
import operator
import statistics

from xcbench.reporting.collect import AT_EPOCH, aggregate, record_value
from xcbench.reporting.labels import caption_name, pretty

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


REDUCE = {"min": min, "max": max}


def side_methods(side: dict, exp: dict) -> list[str]:
    """The methods a side names: `method`, `methods`, or every method `tagged` with all the given tags
    (a method's encoder name counts as one of its tags: `tagged: [static, SASRec]`); none for a constant."""
    if "value" in side:
        return []
    if "tagged" in side:
        want = {side["tagged"]} if isinstance(side["tagged"], str) else set(side["tagged"])
        return [m for m, spec in exp["methods"].items() if want <= {*spec.get("tags", []), method_encoder(exp, m)}]
    if "ratios" in side:
        return list(dict.fromkeys(m for pair in side["ratios"] for m in pair))
    return list(side.get("methods", [side.get("method")]))


def point_side(p: str | list, sweep: dict) -> dict:
    """A sweep's point as a claim side: a method, or a pair [a, b] as the ratio a / b (|a / b - 1| with `gap`)."""
    if isinstance(p, str):
        return {"method": p, "metric": sweep["metric"]}
    return {"ratios": [list(p)], "metric": sweep["metric"], **({"gap": True} if sweep.get("gap") else {})}


def claim_sides(c: dict) -> list[dict]:
    """The sides a claim compares: left and right, the gain's of an `across` claim, or each point of a sweep."""
    if "sweep" in c:
        return [point_side(p, c["sweep"]) for p in c["sweep"]["methods"]]
    return [c["left"], c["right"]] if "left" in c else [c["across"]["gain"]["left"], c["across"]["gain"]["right"]]


def _reduced(side: dict, means: dict) -> float | None:
    """A side's value from its methods' numbers `means` (one run's, or the seed means): the min / max over its
    methods present, or over its `ratios` pairs with both numbers present (a / b); None if none is."""
    vals = ([means[a] / means[b] for a, b in side["ratios"] if a in means and b in means] if "ratios" in side
            else list(means.values()))
    vals = [abs(v - 1.0) for v in vals] if side.get("gap") else vals
    return REDUCE[side.get("reduce", "min")](vals) if vals else None


def method_encoder(exp: dict, method: str) -> str | None:
    enc = (exp["methods"][method].get("model") or {}).get("encoder", exp.get("model", {}).get("encoder"))
    return enc if isinstance(enc, str) else (enc or {}).get("name")


def side_value(side: dict, recs: list[dict], dataset: str, missing: list | None = None, exp: dict | None = None
          ) -> float | None:
    """A side's number; `methods: [...]` with `reduce: min|max` compares against the best/worst of
    several runs (e.g. 'below every static sampler' = below their minimum), over the runs present:
    the absent ones, and the artifact's seeds a present method lacks, are appended to `missing` (the row is
    then `partial`); None if none is there. A constant side is its value."""
    if "value" in side:
        return float(side["value"])
    means, d = {}, side.get("dataset", dataset)
    for m in side_methods(side, exp or {"methods": {}}):
        a = aggregate(recs, d, m, side["metric"])
        if a is None:
            if missing is not None:
                missing.append(m)
            continue
        absent = [str(s) for s in (exp or {}).get("seeds", []) if s not in a["seeds"]]
        if absent and missing is not None:  # a mean over fewer seeds than the artifact's
            missing.append(f"{m} seed {', '.join(absent)}")
        means[m] = a["mean"]
    return _reduced(side, means)


def per_seed(side: dict, recs: list[dict], dataset: str, exp: dict) -> dict:
    """{seed: the side's value} over the seeds every one of its methods ran (reduced as `_side`)."""
    d, by_seed = side.get("dataset", dataset), {}
    methods = side_methods(side, exp)
    for m in methods:
        for r in recs:
            v = record_value(r, side["metric"]) if r["dataset"] == d and r["method"] == m else None
            if v is not None:
                by_seed.setdefault(r.get("seed"), {})[m] = v
    return {s: _reduced(side, v) for s, v in by_seed.items() if len(v) == len(methods)}


def beyond_seeds(c: dict, recs: list[dict], dataset: str, exp: dict) -> tuple[bool | None, str]:
    """(held, how) of `beyond_seed_noise`: the claimed side of every paired per-seed difference, and its mean
    beyond two standard errors; None with one paired seed (no spread to compare the margin with)."""
    factor, offset = float(c.get("factor", 1.0)), float(c.get("offset", 0.0))
    lv, rv = per_seed(c["left"], recs, dataset, exp), per_seed(c["right"], recs, dataset, exp)
    lv, rv = ({s: float(c["left"]["value"]) for s in rv} if "value" in c["left"] else lv,
              {s: float(c["right"]["value"]) for s in lv} if "value" in c["right"] else rv)  # a constant, every seed
    sign = 1.0 if c["op"] in (">", ">=") else -1.0
    diffs = [sign * (lv[s] - (factor * rv[s] + offset)) for s in sorted(set(lv) & set(rv), key=str)]
    if len(diffs) < 2:
        return None, f"{len(diffs)} paired seed"
    held, mean, se = clears_seeds(diffs)
    how = f"paired margin {mean:+.4g} over {len(diffs)} seeds, 2 SE {2 * se:.2g}, smallest {min(diffs):+.4g}"
    return held, how


def clears_seeds(diffs: list[float]) -> tuple[bool, float, float]:
    """(every paired per-seed difference positive and their mean beyond two standard errors, the mean, the standard
    error) for two or more differences: the rule of `beyond_seed_noise`."""
    mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    return min(diffs) > 0 and mean > 2 * se, mean, se


def side_label(side: dict, exp: dict) -> str:
    """Who a side reads, as a claims row names it: a method's caption name, `min(...)` / `max(...)` of several, a
    ratio `a / b` (`abs(a / b - 1)` with `gap`)."""
    def name(m: str) -> str:
        return caption_name(exp, m) if m in exp["methods"] else m

    ratio = "abs({} / {} - 1)" if side.get("gap") else "{} / {}"
    labels = ([ratio.format(name(a), name(b)) for a, b in side["ratios"]] if "ratios" in side
              else [name(m) for m in side_methods(side, exp)])
    return labels[0] if len(labels) == 1 and "tagged" not in side else f"{side.get('reduce', 'min')}({', '.join(labels)})"


def describe(side: dict, exp: dict) -> str:
    if "value" in side:
        return f"{side['value']:g}"
    at = AT_EPOCH.fullmatch(side["metric"])
    metric = f"{at[1].removeprefix('curves.')} at epoch {at[2]}" if at else side["metric"]
    return f"{side_label(side, exp)} {metric}" + (f" ({pretty(side['dataset'])})" if "dataset" in side else "")


def one_epoch(c: dict, recs: list[dict], d: str, exp: dict) -> bool:
    """A claim that compares a run's `first.` (after epoch 1) with a later epoch, on runs of one epoch."""
    for side in (c["left"], c["right"]):
        if side.get("metric", "").startswith("first."):
            trained = [aggregate(recs, side.get("dataset", d), m, "epochs") for m in side_methods(side, exp)]
            if any(t is not None and t["mean"] < 2 for t in trained):
                return True
    return False


def compared_runs(c: dict, recs: list[dict], d: str, exp: dict) -> list[dict]:
    """The records of every run a claim compares on dataset d, both sides."""
    return [r for side in (c["left"], c["right"]) for r in recs
            if r["dataset"] == side.get("dataset", d) and r["method"] in side_methods(side, exp)]


def comparison(lv: float, op: str, rv: float, factor: float, offset: float) -> str:
    """`lv OP [factor ×] rv [± offset]` as a claims row shows it."""
    return (f"{lv:.4g} {op} {(str(factor) + ' × ') if factor != 1 else ''}{rv:.4g}"
            + (f" {'+' if offset > 0 else '-'} {abs(offset):g}" if offset else ""))


def cut_epoch(c: dict, recs: list[dict], d: str, exp: dict) -> int | None:
    """The last epoch that every run a claim compares on dataset d reached, where one of them was cut short by a
    time limit before another's end (a kept cut run beside a finished one); None where they all ran alike."""
    runs = compared_runs(c, recs, d, exp)
    reached = {int(r.get("epochs", 0)) for r in runs}
    return min(reached) if len(reached) > 1 and any(r.get("cut_short_after_epoch") for r in runs) else None


def at_epoch(side: dict, e: int) -> dict:
    """A side's `final.<m>` read after epoch e instead (curves.<m>@e); other metrics unchanged."""
    m = side.get("metric", "")
    return {**side, "metric": f"curves.{m[len('final.'):]}@epoch{e}"} if m.startswith("final.") else side


EVERY = {("<", "min"), ("<=", "min"), (">", "max"), (">=", "max")}  # left OP each method of the right side


def later_counterexample(c: dict, recs: list[dict], d: str, exp: dict, e: int) -> tuple | None:
    """A claim `left OP every method of the right side` (op < with reduce min, > with max) on `final.` metrics,
    whose runs are compared after epoch e, the last all of them reached (one was cut short): it holds only if it
    holds against each method alone, and a pair of runs that both went further than e can refute it with more
    epochs (the finished T = 0.5 beside a T = 0.4 trained as long, with other temperatures cut at 4). Returns the
    refuting pair compared at the last epoch both reached (their ends where neither was cut), the latest such:
    (epoch, method, left value, right value, cut) with `cut` whether a run of the pair was cut; None if none."""
    right, factor, offset = c["right"], float(c.get("factor", 1.0)), float(c.get("offset", 0.0))
    if (c["op"], right.get("reduce", "min")) not in EVERY or "method" in right or "ratios" in right or \
            "method" not in c["left"] or \
            not all(s.get("metric", "").startswith("final.") for s in (c["left"], right)):
        return None
    found = None
    for m in side_methods(right, exp):
        pair = {**c, "right": {**{k: v for k, v in right.items() if k not in ("methods", "tagged", "reduce")}, "method": m}}
        reached = min((int(r.get("epochs", 0)) for r in compared_runs(pair, recs, d, exp)), default=0)
        if reached <= e:
            continue
        e2 = cut_epoch(pair, recs, d, exp)
        if e2 is not None:
            pair = {**pair, "left": at_epoch(pair["left"], e2), "right": at_epoch(pair["right"], e2)}
        lv, rv = side_value(pair["left"], recs, d, None, exp), side_value(pair["right"], recs, d, None, exp)
        if lv is not None and rv is not None and not OPS[c["op"]](lv, factor * rv + offset) and \
                (found is None or reached > found[0]):
            found = (reached, m, lv, rv, e2 is not None)
    return found
