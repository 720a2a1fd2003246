"""Static checks of experiment files, run when the DAG is built (workflow/rules/common.smk) and by
`xcbench check`: a misspelt parameter fails before any job starts, with the file, the key path and the
keys the registered class accepts.

Checked for every method of an experiment at one scale (and every dataset's `per_dataset` override):
- `head` is a registered head; `params` keys are arguments of its constructor (the class's own
  signature, or its parents' where it forwards **kwargs);
- the nested choices a head takes by name and their params: `sampler` / `sampler_params`
  (SAMPLERS), `selector` / `selector_params` (SELECTORS), `dual` / `dual_params` (DUALS);
- the model config's keys (encoder, encoders, tie_embeddings) and every encoder's params (ENCODERS);
- the train config's optimizer (OPTIMIZERS) and schedule (SCHEDULES) names.
Probe tasks that train nothing (timings, statistics, kernel fits) are left to the task itself.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from xcbench.config import ConfigError
from xcbench.registry import ENCODERS, HEADS, NESTED, OPTIMIZERS, SCHEDULES, TASKS, UnknownNameError, init_signatures
from xcbench.runspec import method_config, task_config

FRAMEWORK = {"self", "in_dim", "n_classes", "gen"}
MODEL_KEYS = {"encoder", "encoders", "tie_embeddings"}


def accepted(cls) -> set[str] | None:
    """Keyword arguments a registered class takes (None: anything, a **kwargs it does not forward)."""
    try:
        sigs, closed = init_signatures(cls)
    except (TypeError, ValueError):
        return None
    if not closed:
        return None
    return {n for sig in sigs for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - FRAMEWORK


def _unknown(where: str, given: dict, cls, what: str) -> list[str]:
    ok = accepted(cls)
    if ok is None:
        return []
    out = []
    for k in given:
        if k not in ok:
            near = [o for o in sorted(ok) if o.lower() == k.lower()] or difflib.get_close_matches(k, sorted(ok), n=2)
            out.append(f"{where}.{k}: not a parameter of {what}" + (f" (did you mean {', '.join(near)}?)" if near else "")
                       + f"; it takes {', '.join(sorted(ok)) or 'none'}")
    return out


def _lookup(where: str, registry, name: str) -> tuple[object | None, list[str]]:
    try:
        return registry.get(name), []
    except UnknownNameError as e:
        return None, [f"{where}: {e}"]


def check_method(spec: dict, train: dict, model: dict, where: str) -> list[str]:
    head, errs = _lookup(f"{where}.head", HEADS, spec["head"])
    params = spec.get("params") or {}
    if head is not None:
        errs += _unknown(f"{where}.params", params, head, f"head {spec['head']!r}")
    for key, (registry, sub) in NESTED.items():
        if key in params:
            cls, e = _lookup(f"{where}.params.{key}", registry, params[key])
            errs += e
            if cls is not None:
                errs += _unknown(f"{where}.params.{sub}", params.get(sub) or {}, cls, f"{key} {params[key]!r}")
    errs += [f"{where}.model.{k}: unknown model key; known: {', '.join(sorted(MODEL_KEYS))}" for k in model
             if k not in MODEL_KEYS]
    encoders = dict(model.get("encoders") or {})
    if isinstance(model.get("encoder"), dict):
        encoders["encoder"] = model["encoder"]
    for name, enc in encoders.items():
        cls, e = _lookup(f"{where}.model.encoders.{name}.name", ENCODERS, enc.get("name", "identity"))
        errs += e
        if cls is not None:
            errs += _unknown(f"{where}.model.encoders.{name}", {k: v for k, v in enc.items() if k != "name"}, cls,
                             f"encoder {enc.get('name')!r}")
    for key, registry in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES)):
        if key in train:
            errs += _lookup(f"{where}.train.{key}", registry, train[key])[1]
    return errs


def _places(key: str, exp: dict) -> list[tuple]:
    """Where in the YAML a checked key (`methods.<m>.params.k`, `methods.<m>.model....`, `methods.<m>.train.k`)
    may be written, lowest precedence first, on any of the experiment's datasets (explain.spec_places: the
    resolver's own table)."""
    from xcbench.explain import spec_places

    m = next((m for m in sorted(exp.get("methods", {}), key=len, reverse=True) if key.startswith(f"methods.{m}.")), None)
    if m is None:
        return []
    section, *rest = key[len(f"methods.{m}."):].split(".")
    if section == "model" and rest[:2] == ["encoders", "encoder"]:  # the encoder given inline as `model.encoder`
        rest = ["encoder"] + rest[2:]
    section = {"params": "head_params"}.get(section, section)
    per_dataset = [spec_places(section, d, m) for d in exp.get("datasets", [])]
    return list(dict.fromkeys(p + tuple(rest) for level in zip(*per_dataset) for p in level))  # level by level


def _located(errs: list[str], exp: dict, source: str) -> list[str]:
    """Each error prefixed with the file and line that hold its key, which may be a file the experiment
    `extends` or views (`runs_of`), not the one being resolved."""
    from xcbench.explain import sources, written_at

    try:
        docs = sources(source)
    except (OSError, ValueError):  # an experiment built in code, or a file that cannot be read again
        return errs
    out = []
    for e in errs:
        where = written_at(docs, _places(e.split(":", 1)[0], exp), exp.get("scale", ""))
        out.append(f"{where.split(' (')[0]}: {e}" if where else e)
    return out


def check_experiment(exp: dict, source: str) -> None:
    """Raise ConfigError listing every unknown name or parameter of a resolved experiment's runs, each at
    the file and line that hold it."""
    errs: list[str] = []
    for d in exp.get("datasets", []):
        if not TASKS.get(task_config(exp, d)[0]).trains:  # probes (timings, statistics) read `head` their own way
            continue
        for m in exp.get("methods", {}):
            spec, train, model = method_config(exp, d, m)
            errs += [e for e in check_method(spec, train, model, f"methods.{m}") if e not in errs]
    if errs:
        raise ConfigError(f"{source} (scale {exp.get('scale')}):\n  " + "\n  ".join(_located(errs, exp, source)))


def _requires_problems(cf: Path, claims: list[dict]) -> list[str]:
    """A claim's `requires` must name setup checks (`check: true`) of its own file and artifact: the
    rule matches their rows by dataset, so a misspelt id or another artifact's check would never apply."""
    checks = {c["id"]: c["artifact"] for c in claims if c.get("check")}
    errs = []
    for c in claims:
        for k in c.get("requires", []):
            if k not in checks:
                errs.append(f"{cf}: claim {c['id']}: requires {k!r}, which is not a setup check (`check: true`) "
                            f"in this file; setup checks here: {sorted(checks) or 'none'}")
            elif checks[k] != c["artifact"]:
                errs.append(f"{cf}: claim {c['id']}: requires {k!r} of artifact {checks[k]!r}, not its own "
                            f"{c['artifact']!r}; a setup check applies to its own artifact's datasets")
    return errs


def check_repository(experiments: Path, claims_dir: Path) -> list[str]:
    """`xcbench check`: every experiment at every scale (names, parameters), a method that runs at no
    scale, a view whose datasets its owner does not run, and claims that name an unknown artifact or
    method. Returns the problems found (empty: all good)."""
    from xcbench.config import SCALES, load_experiment, normalise_methods, resolve_experiment
    from xcbench.io import read_yaml
    from xcbench.reporting.claim_values import claim_sides, side_methods

    errs: list[str] = []
    exps: dict[tuple[str, str], dict[str, dict]] = {}
    for f in sorted(experiments.glob("*/*.yaml")):
        raw = load_experiment(f)
        for scale in SCALES:
            try:
                exp = resolve_experiment(raw, scale, check_libraries=False)  # the files, whatever is installed
                check_experiment(exp, str(f))
            except ConfigError as e:
                errs.append(str(e))
                continue
            exps.setdefault((f.parent.name, f.stem), {})[scale] = exp
            if "runs_of" in exp:
                owner = resolve_experiment(load_experiment(f.with_name(f"{exp['runs_of']}.yaml")), scale,
                                           check_libraries=False)
                extra = sorted(set(exp["datasets"]) - set(owner["datasets"]))
                if extra:
                    errs.append(f"{f} (scale {scale}): the view shows datasets {extra} that {exp['runs_of']} does not run")
        defined = normalise_methods(raw.get("methods", {})) if "runs_of" not in raw else {}
        ran = {spec.get("grid_of", m) for exp in exps.get((f.parent.name, f.stem), {}).values()  # an lr grid renames them
               for m, spec in exp["methods"].items()}
        for m in sorted(set(defined) - ran):
            errs.append(f"{f}: method {m!r} runs at no scale (every scale's `skip` lists it)")
    for cf in sorted(claims_dir.glob("*.yaml")):
        claims = read_yaml(cf)["claims"]
        errs += _requires_problems(cf, claims)
        for c in claims:
            runs = exps.get((cf.stem, c["artifact"]))
            if runs is None:
                errs.append(f"{cf}: claim {c['id']}: no artifact {c['artifact']!r} in {experiments / cf.stem}")
                continue
            sides = claim_sides(c)
            names = {m for s in sides if "tagged" not in s for m in side_methods(s, {"methods": {}})}
            known = {m for exp in runs.values() for m in exp["methods"]}
            for m in sorted(names - known):
                errs.append(f"{cf}: claim {c['id']}: method {m!r} is not a run of {c['artifact']} at any scale")
            for s in sides:
                if "tagged" in s and not any(side_methods(s, exp) for exp in runs.values()):
                    errs.append(f"{cf}: claim {c['id']}: no method of {c['artifact']} is tagged {s['tagged']!r}")
    return errs
