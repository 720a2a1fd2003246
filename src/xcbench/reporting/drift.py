"""A kept run checked against today's settings: where the settings it was trained with (its
config.resolved.yaml) differ from the run spec that today's experiment files give it (run.make_run).

The DAG reruns a run whose spec changed (its train rule is keyed by the spec's hash), so a results tree
it wrote is today's by construction. A kept tree (reference/paper, reference/quick) is rendered again by
`xcbench rerender` without training anything: an edit of an experiment file after its runs were kept
would render old numbers under today's settings. `drift` names each differing key, so that rerender
warns and the test of the kept trees fails.

Not drift:
- how the job ran (train.FitOptions: checkpoint_minutes, finish, stop_after; records made before they
  left the train config still hold them);
- which artifact and method key trained it (runs of equal settings train once: run.run_location), and
  the package version;
- the train settings of a task that trains nothing (a probe records none), and a key the spec gained
  after the run whose value today is None (older records lack `features` where there are none);
- a longer `train.plateau.stop_patience` where today's rule, replayed over the run's curve with the same
  lr path (stop_rule.replay), reads the run where it stops (the record was read there: stop_rule.as_today)
  or ends it no earlier than the run ended.
"""

from __future__ import annotations

from xcbench.reporting.stop_rule import replay
from xcbench.run import NAMES
from xcbench.runspec import differences

RUN_OPTIONS = ("checkpoint_minutes", "finish", "stop_after", "interrupt_after")  # train.FitOptions' fields
PATIENCE = "train.plateau.stop_patience"


def drift(recorded: dict, today: dict, rec: dict) -> list[str]:
    """Differences `key: recorded -> today` between a run's recorded settings and today's run spec `today`
    (run.Run.spec); `rec` is its metrics record as collect reads it (after stop_rule.as_today)."""
    keys = [k for k in today if k not in NAMES]
    old = {k: recorded.get(k) for k in keys}  # a key the spec gained later, None today, is absent from older records
    new = {k: today[k] for k in keys}
    if isinstance(old.get("train"), dict):
        old["train"] = {k: v for k, v in old["train"].items() if k not in RUN_OPTIONS}
        if not old["train"]:  # a task that trains nothing records no train settings
            new.pop("train", None), old.pop("train", None)
    return [d for d in differences(old, new) if not (d.startswith(PATIENCE + ":") and _patience_ok(old, new, rec))]


def _patience_ok(old: dict, new: dict, rec: dict) -> bool:
    """A longer stop patience than today's that trained the run today's rule trains, up to where it stops."""
    before, now = old["train"]["plateau"].get("stop_patience"), new["train"]["plateau"].get("stop_patience")
    if not (isinstance(before, (int, float)) and isinstance(now, (int, float)) and before > now):
        return False
    if "trained_past_rule" in rec:  # read where today's rule stops (stop_rule.as_today)
        return True
    same, e = replay(rec, new["train"])
    return same and (e is None or e >= rec.get("epochs", 0))
