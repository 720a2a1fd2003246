"""`xcbench explain`: a run's resolved settings (the run spec that trains it, run.Run.spec) and, for
every value, the file and line that set it.

For a key of the spec, the places it can be written come from the resolver's own table (runspec.PRECEDENCE:
experiment level < `per_dataset.<d>` < `methods.<m>` < `per_dataset.<d>.methods.<m>`); within each place, each
file of the `extends`/`runs_of` chain from the root, its base block before its `scales.<scale>` block; the last
place present in the YAML wins.
A value written nowhere is the resolver's (dataset, seed, version) or the class's default.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from xcbench.config import load_experiment, resolve_experiment
from xcbench.run import make_run
from xcbench.runspec import PRECEDENCE, places
from xcbench.schema import yaml_node


def spec_places(section: str, dataset: str, method: str) -> list[tuple]:
    """Where a run-spec section is written, lowest precedence first: the resolver's own table
    (runspec.PRECEDENCE), not a second statement of it."""
    if section in ("head", "head_params"):
        return [p + (("head",) if section == "head" else ("params",)) for p in places("methods", dataset, method)]
    if section in PRECEDENCE:
        return places(section, dataset, method)
    return [("features",)] if section == "features" else []


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
        where = written_at(docs, [p + rest for p in spec_places(section, dataset, method)], scale) or "resolver / class default"
        lines.append(f"{'.'.join(map(str, key))} = {value!r}    # {where}")
    return "\n".join(lines) + "\n"
