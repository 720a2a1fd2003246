"""`xcbench explain`: a run's resolved settings (the run spec that trains it, run.Run.spec) and, for
every value, the file and line that set it.

The resolver's precedence (config.py) is walked backwards: for a key of the spec, the places it can
be written are listed in precedence order (experiment level < `per_dataset.<d>` < `methods.<m>` <
`per_dataset.<d>.methods.<m>`; within each level, each file of the `extends`/`runs_of` chain from the
root, its base block before its `scales.<scale>` block), and the last place present in the YAML wins.
A value written nowhere is the resolver's (dataset, seed, version) or the class's default.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from xcbench.config import load_experiment, resolve_experiment, yaml_node
from xcbench.run import make_run

SECTIONS = {  # spec section -> the paths under which it is written, lowest precedence first
    "head": [("methods", "{m}", "head")],
    "head_params": [("methods", "{m}", "params"), ("per_dataset", "{d}", "methods", "{m}", "params")],
    "train": [("train",), ("per_dataset", "{d}", "train"), ("methods", "{m}", "train"),
              ("per_dataset", "{d}", "methods", "{m}", "train")],
    "model": [("model",), ("per_dataset", "{d}", "model"), ("methods", "{m}", "model"),
              ("per_dataset", "{d}", "methods", "{m}", "model")],
    "task": [("task",), ("per_dataset", "{d}", "task")],
    "features": [("features",)],
}


def _chain(path: Path) -> list[Path]:
    """The files an experiment is built from, the root first."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    parent = raw.get("extends") or raw.get("runs_of")
    return (_chain(path.with_name(f"{parent}.yaml")) if parent else []) + [path]


def sources(path: str | Path) -> list[tuple[Path, yaml.Node]]:
    """The parsed YAML of every file an experiment is built from, the root first."""
    return [(f, yaml.compose(f.read_text(encoding="utf-8"))) for f in _chain(Path(path))]


def written_at(docs: list[tuple[Path, yaml.Node]], places: list[tuple], scale: str) -> str | None:
    """`file:line (key path)` of the place, among `places` (lowest precedence first), that sets a value
    last: each file of the chain from the root, its base block before its `scales.<scale>` block; None
    where no file writes it."""
    where = None
    for keys in places:
        for f, doc in docs:
            for layer in ((), ("scales", scale)):
                node = yaml_node(doc, layer + tuple(keys))
                if node is not None:
                    where = f"{f}:{node.start_mark.line + 1} ({'.'.join(map(str, layer + tuple(keys)))})"
    return where


def _leaves(d: dict, prefix: tuple = ()) -> list[tuple[tuple, object]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out += _leaves(v, prefix + (k,))
        else:
            out.append((prefix + (k,), v))
    return out


def explain(path: str | Path, scale: str, dataset: str, method: str, seed: int = 0) -> str:
    path = Path(path)
    exp = resolve_experiment(load_experiment(path), scale, check_libraries=False)  # its settings, installed or not
    run = make_run(exp, dataset, method, seed)
    spec = run.spec
    docs = sources(path)
    lines = [f"# run spec of {method} on {dataset}, seed {seed}, scale {scale} ({path})",
             f"# trained as {'/'.join(run.location)} (runs of equal settings train once)", ""]
    for key, value in _leaves(spec):
        section, rest = key[0], key[1:]
        places = [tuple(p.format(d=dataset, m=method) for p in pattern) + rest for pattern in SECTIONS.get(section, [])]
        where = written_at(docs, places, scale) or "resolver / class default"
        lines.append(f"{'.'.join(map(str, key))} = {value!r}    # {where}")
    return "\n".join(lines) + "\n"
