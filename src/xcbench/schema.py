"""Validation of a configuration file against its JSON schema (`src/xcbench/schemas/`, package data), with
errors that name the file, the line and the key path: the deepest failing branch of a `oneOf` rather than "not
valid under any of the given schemas", and NaN / infinity (YAML's .nan, .inf) refused, which a schema's
`type: number` admits."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from xcbench.io import read_yaml

SCHEMAS = Path(__file__).resolve().parent / "schemas"  # package data: found in a checkout and in a wheel


class ConfigError(ValueError):
    """A configuration file that does not match its schema."""


def _leaf(e):
    """The deepest failing branch of a `oneOf`/`anyOf` error: 'methods/m/train/lr: -1 is less than...'
    instead of 'methods: ... is not valid under any of the given schemas'."""
    while e.context:
        e = max(e.context, key=lambda c: (len(c.absolute_path), c.validator != "type"))
    return e


@functools.lru_cache(maxsize=None)
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(read_yaml(SCHEMAS / schema_name))


def yaml_node(node: yaml.Node | None, keys: tuple) -> yaml.Node | None:
    """The node at a key path of a composed YAML document (None where it is not written)."""
    for k in keys:
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((v for kn, v in node.value if kn.value == str(k)), None)
        if node is None:
            return None
    return node


def _non_finite(obj: Any, path: tuple = ()) -> list[tuple]:
    """Key paths of NaN or infinite numbers (YAML's .nan, .inf), which every schema `type: number` admits."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return [path]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _non_finite(v, path + (k,))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _non_finite(v, path + (i,))]
    return []


def _line(source: str | Path, keys: tuple) -> str:
    """`:<line>` of a key path in a YAML file, where it can be found."""
    try:
        node = yaml_node(yaml.compose(Path(source).read_text(encoding="utf-8")), keys)
    except (OSError, yaml.YAMLError):
        return ""
    return f":{node.start_mark.line + 1}" if node is not None else ""


def validate(obj: Any, schema_name: str, source: str | Path) -> None:
    bad = _non_finite(obj)
    if bad:
        raise ConfigError("invalid configuration\n  " + "\n  ".join(
            f"{source}{_line(source, p)}: {'/'.join(map(str, p))}: {_get(obj, p)!r} is not a finite number; write the "
            "value itself (YAML's .nan and .inf are not settings)" for p in bad))
    validator = _validator(schema_name)
    errors = sorted((_leaf(e) for e in validator.iter_errors(obj)), key=lambda e: list(e.absolute_path))
    real = [e for e in errors if e.validator != "unevaluatedProperties"]
    # a failing `settings` reference leaves its keys "unevaluated": that follow-on error says nothing new
    errors = [e for e in errors if e.validator != "unevaluatedProperties"
              or not any(list(r.absolute_path)[:len(e.absolute_path)] == list(e.absolute_path) for r in real)]
    if errors:
        lines = [f"{source}: {'/'.join(map(str, e.absolute_path)) or '(top level)'}: {e.message}"
                 for e in errors]
        raise ConfigError("invalid configuration\n  " + "\n  ".join(lines))


def _get(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj
