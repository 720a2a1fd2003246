"""Configuration: the per-artifact experiment files (the dataset catalogue is catalogue.py).

An experiment file (`config/experiments/<paper>/<artifact>.yaml`) holds the settings shared by all
scales plus a `scales:` block of per-scale overrides; `resolve_experiment` deep-merges the chosen
scale onto the base (dicts merge key by key, lists and scalars replace). Every file is validated
against its JSON schema in `src/xcbench/schemas/` (package data; xcbench/schema.py), so unknown keys are errors that name the file.
`extends: <artifact>` (same folder) deep-merges a file onto another one (its `scales:` too), so a
variant states only what differs; `task: lm` is short for `task: {name: lm, params: {}}`, and a
task's params are checked by the task class itself (tasks/base.py).
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
import functools
import re
from pathlib import Path

from xcbench.io import read_yaml
from xcbench.schema import ConfigError, validate

ROOT = Path(__file__).resolve().parents[2]  # the checkout (config/, results/); a wheel install has none
SCALES = ("tiny", "quick", "paper")
METHOD_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a run's name (a path); a scale's overrides may also use patterns


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def normalise_task(exp: dict) -> dict:
    """`task: name` -> `task: {name, params: {}}`, at the top level and in every scale."""
    exp = dict(exp)
    if isinstance(exp.get("task"), str):
        exp["task"] = {"name": exp["task"], "params": {}}
    if "scales" in exp:
        exp["scales"] = {k: normalise_task(v) for k, v in exp["scales"].items()}
    return exp


def _checked_experiment_file(path: Path) -> dict:
    """The file's YAML, validated against the experiment schema; a fresh copy each call."""
    st = path.stat()
    return copy.deepcopy(_checked_experiment_cached(path.resolve(), path, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=512)
def _checked_experiment_cached(where: Path, path: Path, mtime_ns: int, size: int) -> dict:
    """Read and validate once per file version: building the DAG loads each file ~5 times (its own
    runs, views and variants, collect.trainers), and parsing and validating each load took ~3 of the
    10 s of a tiny `snakemake -n` here (7.5 s with the cache). Keyed by the file's real path, version
    and the name errors give it (`path`); a failure is not cached (the error is raised again on the
    next call)."""
    exp = read_yaml(where)
    validate(exp, "experiment.schema.yaml", path)
    return exp


def load_experiment(path: str | Path, _seen: tuple = ()) -> dict:
    """An experiment file; one with `runs_of: <artifact>` inherits that artifact's runs and settings
    (same folder) and only adds its own title and rendering (its `datasets`, and per-scale ones under
    `scales:`, may narrow the owner's; its `seeds` may add seeds of the owner's runs, trained under the
    owner's folder: run.view_runs); one with `extends: <artifact>` is
    that artifact's file with this one deep-merged on top (a variant with its own runs); its own
    `methods`, when given, replace the parent's instead of merging into them, and so does its `render` when it
    names a `renderer`; a `render` without one layers onto the parent's (`literature: [...]` alone lists other
    published rows under the parent's table layout)."""
    path = Path(path)
    if path in _seen:
        raise ConfigError(f"{path}: `extends` loops: {' -> '.join(map(str, _seen + (path,)))}")
    exp = _checked_experiment_file(path)
    bad = [m for m in exp["methods"] if not METHOD_NAME.fullmatch(m)] if isinstance(exp.get("methods"), dict) else []
    if bad:
        raise ConfigError(f"{path}: methods.{bad[0]}: a method name may hold letters, digits, '_', '.', '-' only "
                          "(patterns such as `gru_*` select methods in a scale's `methods:` overrides)")
    exp = normalise_task(exp)
    if "extends" in exp:
        parent_path = path.with_name(f"{exp['extends']}.yaml")
        if not parent_path.exists():
            raise ConfigError(f"{path}: extends {exp['extends']!r}, but {parent_path} does not exist")
        parent = load_experiment(parent_path, _seen + (path,))
        base = {k: v for k, v in parent.items() if k != "extends"}
        if isinstance(exp.get("methods"), list):  # a list picks the parent's runs by name, with their overrides
            base = _pick_methods(base, exp.pop("methods"), path)
        replaced = ["methods"] if "methods" in exp else []  # a variant's own runs replace the parent's
        if "renderer" in exp.get("render", {}):  # so does a rendering of its own; other render keys layer on
            replaced.append("render")
        for key in replaced:
            base.pop(key, None)
            for sc in base.get("scales", {}).values():
                sc.pop(key, None)
        exp = _layer(base, exp)
    if "runs_of" in exp:
        owner = load_experiment(path.with_name(f"{exp['runs_of']}.yaml"))
        only = exp.pop("methods", None)  # a list: render only these of the owner's runs
        # The view's own keys (title, render, datasets, seeds) beat the owner's scale blocks, as a child's do in
        # `_layer`: an owner that `extends` another file carries its title and render in every scale block.
        mine = {k for k in exp if k not in ("scales", "notes", "runs_of")}
        scales = {s: deep_merge({k: v for k, v in sc.items() if k not in mine}, exp.get("scales", {}).get(s, {}))
                  for s, sc in owner.get("scales", {}).items()}
        scales.update({s: sc for s, sc in exp.get("scales", {}).items() if s not in scales})
        own_notes = exp.pop("notes", None)  # the view's own text, shown after the notes its runs were made under
        exp = {**owner, **exp, **({"scales": scales} if scales else {})}
        if own_notes:
            exp["view_notes"] = own_notes
        if only is not None:  # applied after the scale's own `skip` (a view of the runs that scale has)
            exp["view_methods"] = list(only)
    missing = [k for k in ("renderer", "kind") if k not in exp.get("render", {})]
    if missing:  # checked on the merged file: a variant may give only the keys it changes (its literature rows)
        raise ConfigError(f"{path}: render needs {' and '.join(f'`{k}`' for k in missing)} (in this file, or in "
                          "the file it `extends`); e.g. render: {kind: table, renderer: metric_table}")
    if not _seen:
        exp["source"] = str(path)  # where runs of equal settings are looked up (collect.trainers)
    return exp


def _pick_methods(parent: dict, names: list[str], path: Path) -> dict:
    """`extends` with `methods: [a, b]`: the parent's file narrowed to those methods, each with its settings
    and the parent's overrides of it (in `scales:` and `per_dataset:`, patterns included), so the variant
    trains them as the parent does; `skip` entries and overrides of other methods are dropped."""
    known = normalise_methods(parent.get("methods", {}))
    unknown = [m for m in names if m not in known]
    if unknown:
        raise ConfigError(f"{path}: methods {unknown} are not methods of {parent.get('artifact')}")
    hits = lambda key: bool(fnmatch.filter(names, key))  # noqa: E731  (a name, or a pattern such as gru_*)

    def narrow(block: dict) -> dict:
        out = dict(block)
        if isinstance(out.get("methods"), dict):
            out["methods"] = {k: v for k, v in out["methods"].items() if hits(k)}
        if "skip" in out:
            out["skip"] = [k for k in out["skip"] if hits(k)]
        if "per_dataset" in out:
            out["per_dataset"] = {d: narrow(v) for d, v in out["per_dataset"].items()}
        return out

    out = narrow({**parent, "methods": {m: known[m] for m in names}})
    if "scales" in out:
        out["scales"] = {s: narrow(sc) for s, sc in out["scales"].items()}
    return out


def _layer(parent: dict, child: dict) -> dict:
    """`extends`: the precedence parent < parent's scale block < child < child's scale block. The child's
    base settings are copied into each of the parent's scale blocks, so that resolving a scale (base <
    scale) never lets a parent's scale block override what the child's file says. Caption `notes` are
    text, not settings: a child's notes replace the parent's at every scale (its base and scale blocks), and
    only the child's own scale notes add to them (resolve_experiment), so they are not copied."""
    base = {k: v for k, v in child.items() if k != "scales"}
    own = {k: v for k, v in base.items() if k != "notes"}
    mine = lambda sc: {k: v for k, v in sc.items() if k != "notes"} if "notes" in child else sc  # noqa: E731
    scales = {s: deep_merge(deep_merge(mine(sc), own), child.get("scales", {}).get(s, {}))
              for s, sc in parent.get("scales", {}).items()}
    scales.update({s: sc for s, sc in child.get("scales", {}).items() if s not in scales})
    out = deep_merge({k: v for k, v in parent.items() if k != "scales"}, base)
    return {**out, **({"scales": scales} if scales else {})}


def _is_pattern(key: str) -> bool:
    """An fnmatch pattern (`gru_*`, `*_[25]`), not a method name."""
    return any(c in key for c in "*?[")


def _expand_patterns(over: dict, known: dict, where: str) -> dict:
    """A scale's or a dataset's method overrides keyed by a pattern (`"gru_*": {...}`, fnmatch) apply to
    every method it matches, before the overrides named exactly (which win); a pattern matching nothing is an error."""
    out: dict = {}
    for key, spec in over.items():
        if _is_pattern(key):
            hits = fnmatch.filter(known, key)
            if not hits:
                raise ConfigError(f"{where}.methods.{key}: the pattern matches none of the methods {list(known)}")
            for m in hits:
                out[m] = deep_merge(out.get(m, {}), spec or {})
    for key, spec in over.items():
        if not _is_pattern(key):
            out[key] = deep_merge(out.get(key, {}), spec or {})
    return out


def resolve_experiment(exp: dict, scale: str, check_libraries: bool = True) -> dict:
    """The experiment at one scale: base settings with `scales[scale]` merged on top; methods whose optional
    library is not installed are left out (`unavailable` says why) unless `check_libraries` is False."""
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {SCALES}, got {scale!r}")
    base = {k: v for k, v in exp.items() if k != "scales"}
    over = exp.get("scales", {}).get(scale, {})
    known = base.get("methods", {})
    if isinstance(over.get("methods"), dict) and isinstance(known, dict):
        over = {**over, "methods": _expand_patterns(over["methods"], known, f"{exp.get('artifact')}: scales.{scale}")}
    for m, spec in (over.get("methods") or {}).items() if isinstance(over.get("methods"), dict) else ():
        if isinstance(known, dict) and m not in known and not (spec or {}).get("head"):
            near = difflib.get_close_matches(m, list(known), n=3)
            raise ConfigError(f"{exp.get('paper')}/{exp.get('artifact')}: scales.{scale}.methods.{m}: no method {m!r} "
                              f"in this experiment" + (f" (did you mean {', '.join(near)}?)" if near else "") +
                              "; a scale may only override methods defined above it, or define a new one with `head:`")
    out = deep_merge(base, over)
    if base.get("notes") and over.get("notes"):  # a scale's notes add to the shared ones (what only that scale does)
        out["notes"] = f"{base['notes'].strip()} {over['notes'].strip()}"
    if "task" in out:
        out["task"].setdefault("params", {})
    out["scale"] = scale
    out["methods"] = normalise_methods(out.get("methods", {}))
    if isinstance(out.get("per_dataset"), dict):  # a dataset's method overrides may be keyed by a pattern too
        out["per_dataset"] = {d: {**b, "methods": _expand_patterns(b["methods"], out["methods"],
                                                                  f"{out.get('artifact')}: per_dataset.{d}")}
                              if isinstance((b or {}).get("methods"), dict) else b
                              for d, b in out["per_dataset"].items()}
    if "skip" in out:  # every method runs at every scale unless the scale skips it (names or fnmatch patterns)
        unknown = [p for p in out["skip"] if not fnmatch.filter(out["methods"], p)]
        if unknown:
            owner = f"runs of {out['runs_of']}" if "runs_of" in out else "methods of this experiment"
            raise ConfigError(f"{out['artifact']}: scales.{scale}.skip names {unknown}, which match none of the {owner}")
        skip = out.pop("skip")
        out["methods"] = {m: v for m, v in out["methods"].items() if not any(fnmatch.fnmatch(m, p) for p in skip)}
    if "view_methods" in out:
        unknown = [m for m in out["view_methods"] if m not in normalise_methods(exp.get("methods", {}))]
        if unknown:
            raise ConfigError(f"{out['artifact']}: methods {unknown} are not runs of {out['runs_of']}")
        out["methods"] = {m: out["methods"][m] for m in out.pop("view_methods") if m in out["methods"]}
    if "lr_grid" in out:  # every method at every lr of a stated grid (lr_grid.py), after the scale's skips
        from xcbench.lr_grid import expand, per_dataset_points  # a leaf module: it imports nothing of the package
        try:
            out["methods"] = expand(out["methods"], out.pop("lr_grid"), out)
            if "per_dataset" in out:
                out["per_dataset"] = per_dataset_points(out["per_dataset"], out["methods"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
    from xcbench.registry import unavailable  # the registries import torch: only here, not for loading a file
    missing = unavailable(out["methods"]) if check_libraries else {}
    if missing:  # an optional library is not installed: these runs are left out (the DAG says so, captions too)
        out["unavailable"] = {m: f"{out['methods'][m].get('label', m)}: {why}" for m, why in missing.items()}
        out["methods"] = {m: v for m, v in out["methods"].items() if m not in missing}
    return out


def normalise_methods(methods: list | dict) -> dict[str, dict]:
    """Methods as {run name: spec}; a bare name means the head of that name with defaults."""
    if isinstance(methods, list):
        methods = {m: {} for m in methods}
    out = {}
    for name, spec in methods.items():
        spec = dict(spec or {})
        spec.setdefault("head", name)
        out[name] = spec
    return out
