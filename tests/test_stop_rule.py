"""A kept run trained past where today's stopping rule ends it is read at that epoch (reporting/stop_rule.py)."""

import math
import random

from xcbench.reporting.stop_rule import read_at_stop, rule_stop
from xcbench.schedules import Plateau

RULE = {"metric": "ppl", "mode": "min", "factor": 0.25, "patience": 2, "min_lr": 0.01, "min_delta": 0.1}


def _trained(vals: list[float], stop_patience: int, lr: float = 20.0, cut: int | None = None) -> dict:
    """The record of a run that followed the plateau rule with `stop_patience` over the validation values `vals`
    (epochs 1..), stopped by it or cut after epoch `cut`; its selected epoch is the best by min_delta."""
    rule = Plateau(lr, **RULE, stop_patience=stop_patience)
    epochs, lrs, seen, best, best_e = [0], [0.0], [1e4], float("inf"), 0
    for e, v in enumerate(vals, 1):
        epochs.append(e), lrs.append(rule.lr), seen.append(v)
        if v < best - RULE["min_delta"]:
            best, best_e = v, e
        if rule.update(v) or e == cut:
            break
    return {"epochs": epochs[-1], "best_epoch": best_e, "curves": {"epoch": epochs, "lr": lrs, "val_ppl": seen},
            "final": {"val_ppl": seen[-1], "step_ms": 3.0}, **({"cut_short_after_epoch": cut} if cut else {})}


def test_a_run_of_a_longer_patience_is_read_where_todays_rule_stops():
    g, hits = random.Random(0), []
    for _ in range(200):  # brute force: the run today's rule trains is the old run's first e* epochs
        tau = g.uniform(2.0, 15.0)  # a curve that levels off at 50, with noise of the order of min_delta
        vals = [50.0 + 100.0 * math.exp(-e / tau) + g.uniform(0, 0.12) for e in range(60)]
        today = _trained(vals, stop_patience=4)
        old = _trained(vals, stop_patience=100, cut=g.randint(1, 60))
        train = {"schedule": "plateau", "lr": 20.0, "plateau": {**RULE, "stop_patience": 4}}
        e = rule_stop(old, train)
        if today["epochs"] < old["epochs"] and old["best_epoch"] <= today["epochs"]:  # stops inside: read there
            assert e == today["epochs"]
            r = read_at_stop(old, e)
            assert r["curves"] == today["curves"] and r["final"]["val_ppl"] == today["final"]["val_ppl"]
            assert r["epochs"] == e and "cut_short_after_epoch" not in r and r["trained_past_rule"] == old["epochs"]
            assert r["final"]["step_ms"] == 3.0  # the wall-clock numbers stay the run's
            hits.append(e)
        else:  # it ran no further than today's rule would, or gained again after e* (its test numbers are later's)
            assert e is None
    assert 10 < len(hits) < 190  # both branches taken (19 of 200 read at e*)


def test_no_reading_where_the_trajectory_or_the_selected_epoch_differs():
    vals = [50.0, 40.0, 39.0] + [38.99] * 20
    old = _trained(vals, stop_patience=100)
    train = {"schedule": "plateau", "lr": 20.0, "plateau": {**RULE, "stop_patience": 4}}
    assert rule_stop(old, train) == 7
    assert rule_stop(old, {**train, "lr": 10.0}) is None  # another lr path: another rule trained it
    assert rule_stop({**old, "best_epoch": 9}, train) is None  # its test numbers come from after e*
    assert rule_stop(old, {**train, "schedule": "constant"}) is None
