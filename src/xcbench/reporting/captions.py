"""Caption and footer text for every table and figure: title, scale, data substitutions, seeds."""

from __future__ import annotations

import xcbench.tasks  # noqa: F401  (registers the tasks)
from xcbench.registry import TASKS
from xcbench.reporting.labels import pretty


def substitutions(exp: dict, catalogue: dict) -> list[str]:
    notes = []
    for d in exp["datasets"]:
        entry = catalogue.get(d, {})
        if entry.get("stands_in_for"):
            notes.append(f"{pretty(d)} stands in for {', '.join(entry['stands_in_for'])}"
                         + (f" ({entry['note']})" if entry.get("note") else ""))
    return notes


def setup(exp: dict) -> str:
    """One sentence on features, encoder and optimisation, read from the resolved experiment."""
    parts = []
    if exp.get("features"):
        f = exp["features"]
        parts.append(f"{f['extractor']} features (d = {f.get('dim', 512)})")
    enc = dict(exp.get("model", {}).get("encoder", {"name": "identity"}))
    name = enc.pop("name")
    if name != "identity" or enc:
        parts.append(f"encoder {name}" + (f" ({', '.join(f'{k} {v}' for k, v in enc.items())})" if enc else ""))
    probe = exp.get("task") in TASKS.names() and getattr(TASKS.get(exp["task"]), "probe", False)
    t = {} if probe else exp.get("train", {})  # a probe (tasks/probes.py) trains nothing
    if t:
        parts.append(f"{t.get('optimizer', 'adam')} lr {t.get('lr')}, {t.get('schedule', 'constant')} schedule, "
                     f"{t.get('epochs')} epochs, batch {t.get('batch_size')}")
    return ("Setup: " + "; ".join(parts) + ".") if parts else ""


def footer(exp: dict, catalogue: dict) -> str:
    parts = [f"Scale: {exp['scale']}.", f"Seeds: {', '.join(map(str, exp['seeds']))}.", setup(exp)]
    subs = substitutions(exp, catalogue)
    if subs:
        parts.append("Substitutions: " + "; ".join(subs) + ".")
    if exp.get("notes"):
        parts.append(exp["notes"].strip())
    return " ".join(p for p in parts if p)
