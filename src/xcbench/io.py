"""Atomic file writes: write to a temporary file beside the target, then rename.

An interrupted run therefore never leaves a half-written result, checkpoint or table behind.
The file gets the mode a plain `open` would give it (0o666 less the umask): `mkstemp` alone creates
it 0o600, unreadable by collaborators sharing a results tree. `sha256_of` reads a file's digest in 1-MiB blocks
(a fetched file's check, a run's input files).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto `path` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files `atomic_path` left in `folder` when a process was killed mid-write
    (SIGKILL runs no `finally`). Call it where one process owns the folder, as a run owns its run
    folder; returns what it removed."""
    folder = Path(folder)
    stale = [p for p in folder.glob(".*.tmp") if p.is_file()] if folder.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def current_umask() -> int:
    """The process's umask (reading it means setting it; it is restored at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The file's sha256 as hex, read in blocks of `chunk` bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_yaml(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, yaml.safe_dump(obj, sort_keys=False))


class DuplicateKeyError(yaml.YAMLError):
    """One mapping names a key twice; YAML would keep the last value and drop the first without a word."""

    def __init__(self, key: Any, first: int, mark) -> None:
        super().__init__(f"{key!r} twice in one mapping")
        self.key, self.first, self.problem_mark = key, first, mark


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml's parser: 10x faster, same results
    """The safe loader, refusing a mapping that names a key twice (a second `why_not:` under one claim silently
    replaced the first). Keys merged in with `<<: *anchor` may still be overridden: that is what merging is for."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for k, _ in node.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(k, deep=True)
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise DuplicateKeyError(key, seen[key], k.start_mark)
                seen[key] = k.start_mark.line + 1
        return super().construct_mapping(node, deep)


SAFE_LOADER = _UniqueKeyLoader


class YAMLSyntaxError(ValueError):
    """A YAML file that does not parse: names the file and line."""


def read_yaml(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        try:
            return yaml.load(f, Loader=SAFE_LOADER)
        except DuplicateKeyError as e:
            raise YAMLSyntaxError(f"{path}:{e.problem_mark.line + 1}: key {e.key!r} appears twice in one mapping (first "
                                  f"at line {e.first}); YAML would keep only this one: merge the two or delete one") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            what = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise YAMLSyntaxError(f"{where}: YAML syntax error: {what}; fix that line (indentation, a missing "
                                  f"':' or an unclosed bracket or quote)") from None


def torch_save(path: str | os.PathLike, obj: Any) -> None:
    import torch

    # through a file object: the archive's records are then named `archive/...`, not after the temp file's random
    # name, so equal objects give equal bytes (a features file's digest in a run's `inputs`, records.input_digests)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
