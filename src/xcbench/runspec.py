"""The overrides that make one run's settings (run.make_run builds the run from them), and the digest
of its run spec (`spec_hash`: the DAG's train rule and a checkpoint are keyed by it).

Order of overrides (last wins): the experiment's settings (after its scale: config.resolve_experiment),
the dataset's `per_dataset` entry (train, model, task, and head params under `methods`), the method's own.
"""

from __future__ import annotations

import hashlib
import json

from xcbench.config import ConfigError, deep_merge


def method_config(exp: dict, dataset: str, method: str) -> tuple[dict, dict, dict]:
    """(method spec, train config, model config) of one run: the experiment's settings, overridden by
    its `per_dataset` entry (train, model, and the method's head params under `methods`), overridden
    by the method's own."""
    spec = exp["methods"][method]
    per_ds = exp.get("per_dataset", {}).get(dataset, {})
    over = per_ds.get("methods", {}).get(method, {})
    if over:
        spec = deep_merge(spec, over)
    train_cfg = deep_merge(deep_merge(exp.get("train", {}), per_ds.get("train", {})), spec.get("train", {}))
    base = exp.get("model", {})
    enc = per_ds.get("model", {}).get("encoder")
    if isinstance(enc, dict) and enc.get("name") != base.get("encoder", {}).get("name"):
        base = {k: v for k, v in base.items() if k != "encoder"}  # another encoder: none of the base's params
    model_cfg = deep_merge(deep_merge(base, per_ds.get("model", {})), spec.get("model", {}))
    return spec, train_cfg, model_cfg


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
