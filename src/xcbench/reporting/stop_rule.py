"""A kept run read where today's stopping rule ends it.

A run trains epochs 1..E under a plateau schedule (schedules.Plateau): after epoch e it sees the validation
value v_e, lowers the lr after `patience` epochs without a gain of `min_delta`, and stops once `stop_patience`
epochs pass without one. The trajectory up to epoch e depends only on v_1..v_e and the rule's settings other
than `stop_patience`, so a run trained under a longer `stop_patience` (an older setting; often a run then cut by
a time limit) is, up to the epoch e* where today's rule stops, the run that today's settings train:

    e* = min { e : Plateau(today's settings).update(v_1), ..., .update(v_e) returns True }

provided that the replayed lr equals the run's recorded lr at every epoch up to e* (the same rule with the same
steps) and the run's selected epoch (where its test metrics come from) is at or before e*. Such a record is
read at e*: its curves end there, its `final.*` values are epoch e*'s, it stopped early (not cut short).

`stop_window` is the number of epochs without a gain after which a run's rules (`select.patience`, the plateau's
`stop_patience`) can end it before its planned epochs: the captions and the cost plan read it.
"""

from __future__ import annotations

from xcbench.schedules import Plateau, plateau_settings


def replay(rec: dict, train: dict) -> tuple[bool, int | None]:
    """Today's plateau rule (train config `train`) replayed over a record's validation curve: (whether the
    record's lr followed it at every epoch up to its stop or the record's end, the epoch where it stops or
    None where it does not within the record). (False, None): no plateau rule, or no curves to replay."""
    if train.get("schedule") != "plateau":
        return False, None
    rule = Plateau(float(train["lr"]), **(train.get("plateau") or {}))
    curves = rec.get("curves") or {}
    epochs, vals, lrs = curves.get("epoch"), curves.get(f"val_{rule.metric}"), curves.get("lr")
    if not epochs or not vals or not lrs:
        return False, None
    for e, v, lr in zip(epochs, vals, lrs):
        if e == 0:
            continue  # the evaluation before training
        if v is None or lr is None or abs(float(lr) - rule.lr) > 1e-9 * max(1.0, rule.lr):
            return False, None  # another lr path: another rule trained it
        if rule.update(float(v)):
            return True, e
    return True, None


def rule_stop(rec: dict, train: dict) -> int | None:
    """e* of a run record under the train config `train`, or None: no plateau rule, no stop before the
    run's last epoch, a different lr path, or a selected epoch after e*."""
    same, e = replay(rec, train)
    if not same or e is None:
        return None
    return e if e < rec.get("epochs", e) and rec.get("best_epoch", 0) <= e else None


def read_at_stop(rec: dict, e: int) -> dict:
    """The record as today's rule leaves it after epoch e: curves to e, `final.*` of epoch e (step time and
    other wall-clock numbers stay the run's), stopped early instead of cut short."""
    i = rec["curves"]["epoch"].index(e)
    curves = {k: v[: i + 1] for k, v in rec["curves"].items()}
    final = {**rec.get("final", {}), **{k: curves[k][i] for k in rec.get("final", {}) if k in curves}}
    out = {k: v for k, v in rec.items() if k != "cut_short_after_epoch"}
    return {**out, "curves": curves, "final": final, "epochs": e, "trained_past_rule": rec["epochs"]}


def stopped_early_at(rec: dict, planned: int) -> int | None:
    """The epoch where a run's rule stopped it before its `planned` epochs, None for a run cut short or trained to
    its end."""
    e = rec.get("epochs", planned)
    return e if not rec.get("cut_short_after_epoch") and e < planned else None


def as_today(rec: dict, train: dict) -> dict:
    """The record as today's train config `train` leaves it: read at e* where its rule stops a run trained
    past it, else unchanged."""
    e = rule_stop(rec, train)
    return read_at_stop(rec, e) if e is not None else rec


def stop_window(train: dict) -> int | None:
    """Epochs without a validation gain after which a run's rules end it (`select.patience`, the plateau
    schedule's `stop_patience`, the smaller), where that is fewer than its planned epochs; else None."""
    plateau = plateau_settings(train) or {}
    w = [p for p in ((train.get("select") or {}).get("patience"), plateau.get("stop_patience")) if p]
    return min(w) if w and min(w) < train.get("epochs", 0) else None
