"""The overrides that make one run's settings (run.make_run builds the run from them), and the digest
of its run spec (`spec_hash`: the DAG's train rule and a checkpoint are keyed by it).

Order of overrides (last wins), written once in `PRECEDENCE` (method_config merges by it, `xcbench explain` locates
values by it): the experiment's settings (after its scale: config.resolve_experiment), the dataset's `per_dataset`
entry, the method's own, the method's `per_dataset` entry.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from xcbench.config import ConfigError, deep_merge

PRECEDENCE = {  # where each part of a run's settings is written, lowest precedence first (the one statement of it)
    "methods": [("methods", "{m}"), ("per_dataset", "{d}", "methods", "{m}")],
    "train": [("train",), ("per_dataset", "{d}", "train"), ("methods", "{m}", "train"),
              ("per_dataset", "{d}", "methods", "{m}", "train")],
    "model": [("model",), ("per_dataset", "{d}", "model"), ("methods", "{m}", "model"),
              ("per_dataset", "{d}", "methods", "{m}", "model")],
    "task": [("task",), ("per_dataset", "{d}", "task")],
}


def places(section: str, dataset: str, method: str) -> list[tuple]:
    """The key paths of one section of a run's settings, lowest precedence first (`PRECEDENCE`)."""
    return [tuple(k.format(d=dataset, m=method) for k in path) for path in PRECEDENCE[section]]


def _at(exp: dict, path: tuple):
    for k in path:
        exp = exp.get(k) if isinstance(exp, dict) else None
    return exp


def _merged(exp: dict, section: str, dataset: str, method: str) -> dict:
    """A section's layers deep-merged in precedence order; a layer naming another encoder (a dict with its own
    `name`) replaces the encoder before it instead of merging into its parameters."""
    out: dict = {}
    for path in places(section, dataset, method):
        layer = _at(exp, path) or {}
        enc, before = layer.get("encoder"), out.get("encoder")
        if isinstance(enc, dict) and isinstance(before, dict) and enc.get("name") != before.get("name"):
            out = {k: v for k, v in out.items() if k != "encoder"}
        out = deep_merge(out, layer)
    return out


def method_config(exp: dict, dataset: str, method: str) -> tuple[dict, dict, dict]:
    """(method spec, train config, model config) of one run, each merged over its places in `PRECEDENCE`: the
    experiment's settings < its `per_dataset` entry < the method's own < the method's `per_dataset` entry."""
    return _merged(exp, "methods", dataset, method), _merged(exp, "train", dataset, method), \
        _merged(exp, "model", dataset, method)


def encoder_config(model_cfg: dict) -> dict:
    """The encoder's {name, **params}, resolving a named entry of `model.encoders`."""
    enc = model_cfg.get("encoder", {"name": "identity"})
    if isinstance(enc, str):
        named = model_cfg.get("encoders", {})
        if enc not in named:
            raise ConfigError(f"model.encoder {enc!r} is not among model.encoders {sorted(named)}; "
                              "name one of them or give {name: ..., params}")
        enc = named[enc]
    return dict(enc)


def task_config(exp: dict, dataset: str | None) -> tuple[str, dict]:
    """(task name, params as written) of one dataset's runs: the experiment's task, overridden or
    replaced by the dataset's `per_dataset` entry (make_task's rule)."""
    own = exp.get("per_dataset", {}).get(dataset, {}).get("task", {})
    name = own.get("name", exp["task"]["name"])
    base = {} if name != exp["task"]["name"] else (exp["task"].get("params") or {})
    return name, {**base, **(own.get("params") or {})}


def spec_hash(spec: dict) -> str:
    """A short stable digest of a run spec (the train rule's `params:`)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Dotted key paths where two nested dicts differ, with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += differences(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        return out
    return [] if old == new else [f"{path or '(spec)'}: {old!r} -> {new!r}"]
