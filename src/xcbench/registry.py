"""Name -> class registries, one per family of interchangeable parts.

A method is added by writing one class and decorating it with `@FAMILY.register("key")`.
The key is the only identifier of the method: the YAML key, the result path and the table row.
Lookups of unknown names raise a `KeyError` listing every known name.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any, Callable, Iterator

_BUILTIN_MODULES = (  # the packages whose modules register the built-in entries
    "xcbench.heads",
    "xcbench.samplers",
    "xcbench.selectors",
    "xcbench.optim",
    "xcbench.features",
    "xcbench.data",
    "xcbench.tasks",
    "xcbench.reporting",
)
_imported: set[str] = set()


class UnknownNameError(KeyError):
    """A registry lookup with a name nobody registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class Registry:
    """A named mapping from keys to classes (or factory functions). A lookup first imports the family's
    `homes`, the packages that register its built-in entries (all of them unless narrowed: renderers live
    in xcbench.reporting alone, so rendering a table never imports torch)."""

    def __init__(self, family: str, homes: tuple[str, ...] = _BUILTIN_MODULES) -> None:
        self.family, self.homes = family, homes
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[Any], Any]:
        def deco(obj: Any) -> Any:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.family} {name!r} is registered twice")
            self._entries[name] = obj
            obj.registry_name = name
            return obj

        return deco

    def get(self, name: str) -> Any:
        _import_builtin_modules(self.homes)
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise UnknownNameError(
                f"unknown {self.family} {name!r}; known {self.family}s: {known}"
            ) from None

    def find(self, name: str) -> Any | None:
        """The entry of `name`, or None where nobody registered it."""
        _import_builtin_modules(self.homes)
        return self._entries.get(name)

    def build(self, name: str, **kwargs: Any) -> Any:
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        _import_builtin_modules(self.homes)
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        _import_builtin_modules(self.homes)
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


HEADS = Registry("head")
SAMPLERS = Registry("sampler")
SELECTORS = Registry("selector")
OPTIMIZERS = Registry("optimizer")
ENCODERS = Registry("encoder")
FEATURES = Registry("feature extractor")
READERS = Registry("dataset format")
GENERATORS = Registry("synthetic generator")
TASKS = Registry("task")
RENDERERS = Registry("renderer", homes=("xcbench.reporting",))
SCHEDULES = Registry("lr schedule")
LOSSES = Registry("one-vs-all loss")
ESTIMATORS = Registry("kernel estimator")
DUALS = Registry("dual update rule")
FAMILIES = {"heads": HEADS, "samplers": SAMPLERS, "selectors": SELECTORS, "optimizers": OPTIMIZERS,
            "schedules": SCHEDULES, "duals": DUALS, "losses": LOSSES, "encoders": ENCODERS, "features": FEATURES,
            "readers": READERS, "generators": GENERATORS, "tasks": TASKS, "estimators": ESTIMATORS,
            "renderers": RENDERERS}  # every family, for `xcbench list` and the parametrized tests
NESTED = {"sampler": (SAMPLERS, "sampler_params"), "selector": (SELECTORS, "selector_params"),
          "dual": (DUALS, "dual_params")}  # a head's params that name an entry of another family, and its params


def init_signatures(obj: Any) -> tuple[list[inspect.Signature], bool]:
    """The signatures that take a registered entry's settings: a function's own, or a class's __init__ and then
    its parents' for as long as each forwards **kwargs (the sparse heads take fan_in, ... through SparseOvA's).
    `closed`: the walk ended at one without **kwargs (else any keyword may be taken). Raises TypeError or
    ValueError where a signature cannot be read."""
    chain = [k.__init__ for k in obj.__mro__ if "__init__" in k.__dict__ and k is not object] \
        if isinstance(obj, type) else [obj]
    sigs = []
    for init in chain:
        sigs.append(inspect.signature(init))
        if not any(p.kind == p.VAR_KEYWORD for p in sigs[-1].parameters.values()):
            return sigs, True
    return sigs, False


def unavailable(methods: dict[str, dict]) -> dict[str, str]:
    """{method: why it cannot run here} for methods whose head, sampler or selector `requires` an
    optional library that is not installed (e.g. faiss_ivf without the `ann` extra)."""
    out = {}
    for m, spec in methods.items():
        params = spec.get("params") or {}
        classes = [HEADS.find(spec.get("head", ""))]
        classes += [reg.find(params[key]) for key, (reg, _) in NESTED.items() if key in params]
        for cls in classes:
            lib = getattr(cls, "requires", None)
            if lib and importlib.util.find_spec(lib) is None:
                out[m] = f"needs {lib}: pip install -e \".[{getattr(cls, 'extra', None) or lib}]\""
    return out


def import_submodules(package: str) -> None:
    """Import every module of a package folder, so that a new file's `@FAMILY.register` runs without
    editing the package's __init__ (adding a method = one file + one registration + one YAML line)."""
    import importlib
    import pkgutil

    pkg = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        importlib.import_module(f"{package}.{info.name}")


def _import_builtin_modules(homes: tuple[str, ...] = _BUILTIN_MODULES) -> None:
    """Import the packages that register built-in entries (each once)."""
    import importlib

    for mod in homes:
        if mod not in _imported:
            _imported.add(mod)
            importlib.import_module(mod)
