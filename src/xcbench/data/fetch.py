"""Fetching raw datasets: local mirrors first, then the original URLs; sha256-verified.

Search order for every file of a dataset entry in `config/datasets.yaml`:
  1. `$XCBENCH_MIRROR/<mirror_dir>/<name>`            (environment variable, if set)
  2. `<mirror>/<mirror_dir>/<name>` for each folder in `data.mirrors` of config/config.yaml
  3. each URL of the entry, downloaded with a progress bar.
Every candidate is copied or downloaded to a temporary file beside the target, its sha256 is
checked, and only then is it renamed into `data/raw/<dataset>/`. Archives (`extract: true`) are
unpacked into a temporary folder; a member whose path would land outside the target folder is
refused, and a truncated archive is reported and removed. Where the entry gives no sha256 (the
large XC archives, ml-10m.zip, the SNAP logs: their sources publish none), the first fetch's hash is
recorded in `data/raw/sha256-recorded.tsv` with a loud warning (trust on first use), and every
later fetch is checked against it; the hash can then be pasted into datasets.yaml.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from xcbench.io import atomic_path, write_json, write_text

MIRROR_ENV = "XCBENCH_MIRROR"
URL_TIMEOUT_S = 30


class FetchError(RuntimeError):
    """A dataset file that could not be obtained or verified."""


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def mirror_roots(mirrors: Iterable[str | os.PathLike]) -> list[Path]:
    roots = [Path(m) for m in mirrors]
    env = os.environ.get(MIRROR_ENV)
    return ([Path(env)] if env else []) + roots


def _download(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as resp:  # noqa: S310 (http(s) URLs from datasets.yaml)
        total = int(resp.headers.get("Content-Length") or 0) or None
        with open(dest, "wb") as f, tqdm(total=total, unit="B", unit_scale=True, desc=dest.name.lstrip("."),
                                         disable=None) as bar:
            while block := resp.read(1 << 20):
                f.write(block)
                bar.update(len(block))


def _candidates(name: str, entry: dict, roots: list[Path]) -> list[tuple[str, str]]:
    """(kind, location) pairs to try, in order."""
    sub = entry.get("mirror_dir", entry["name"])
    out = [("mirror", str(root / sub / name)) for root in roots]
    out += [("url", url) for url in entry.get("urls", [])]
    return out


RECORDED = "sha256-recorded.tsv"  # beside the datasets' raw folders: dataset, file, sha256 of the first fetch


def recorded_hashes(raw_root: Path) -> dict[tuple[str, str], str]:
    path = raw_root / RECORDED
    if not path.exists():
        return {}
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line and line[0] != "#"]
    return {(r[0], r[1]): r[2] for r in rows if len(r) >= 3}


def record_hash(raw_root: Path, dataset: str, name: str, sha: str) -> None:
    rec = recorded_hashes(raw_root)
    rec[(dataset, name)] = sha
    lines = ["# sha256 of files whose catalogue entry has none, recorded at their first fetch; later fetches must match"]
    lines += [f"{d}\t{f}\t{h}" for (d, f), h in sorted(rec.items())]
    write_text(raw_root / RECORDED, "\n".join(lines) + "\n")


def fetch_file(spec: dict, entry: dict, target_dir: Path, roots: list[Path]) -> dict:
    """Obtain one file of a dataset into target_dir; returns its manifest record."""
    name, want = spec["name"], spec.get("sha256")
    if not want:  # trust on first use: the hash of this file's first fetch, if any
        want = recorded_hashes(target_dir.parent).get((entry["name"], name))
    target = target_dir / name
    if target.exists() and want and sha256_of(target) == want:
        return {"sha256": want, "source": "cached", "bytes": target.stat().st_size}
    tried = []
    for kind, loc in _candidates(name, {**entry, "urls": spec.get("urls", [])}, roots):
        if kind == "mirror" and not Path(loc).is_file():
            tried.append(f"mirror {loc}: not there")
            continue
        try:
            with atomic_path(target) as tmp:
                if kind == "mirror":
                    shutil.copyfile(loc, tmp)
                else:
                    _download(loc, tmp)
                got = sha256_of(tmp)
                if want and got != want:
                    where = ("config/datasets.yaml" if spec.get("sha256")
                             else f"{target_dir.parent / RECORDED}, recorded at its first fetch")
                    raise FetchError(f"sha256 mismatch: expected {want} ({where}), got {got} (a corrupt or different "
                                     "file; the copy was discarded)")
            return {"sha256": got, "source": loc, "bytes": target.stat().st_size,
                    **({} if want else {"sha256_recorded_on_first_fetch": True})}
        except FetchError as e:  # a bad copy: warn, name it, and try the next source
            print(f"warning: {entry['name']}: {kind} {loc} does not verify ({e}); trying the next source "
                  "(replace or delete that copy)", file=sys.stderr)
            tried.append(f"{kind} {loc}: {e}")
        except (OSError, ValueError) as e:  # URLError is an OSError
            tried.append(f"{kind} {loc}: {e}")
    sub = entry.get("mirror_dir", entry["name"])
    raise FetchError(
        f"dataset {entry['name']!r}: could not obtain {name}.\n  tried:\n    " + "\n    ".join(tried) +
        f"\n  fix: download it from {', '.join(spec.get('urls', [])) or '(no URL known)'} and place it at "
        f"<mirror>/{sub}/{name}, where <mirror> is ${MIRROR_ENV} or a folder listed in data.mirrors "
        f"(config/config.yaml; pass --config 'data={{mirrors: [...]}}' or set {MIRROR_ENV}=/path)")


def _safe_members(names: list[str], dest: Path) -> None:
    root = dest.resolve()
    for n in names:
        p = (dest / n).resolve()
        if p != root and root not in p.parents:
            raise FetchError(f"archive member {n!r} would be written outside {dest}; refusing to extract")


def extract(archive: Path, dest: Path) -> list[str]:
    """Unpack a zip or tar archive into dest, refusing members that escape it."""
    tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest))
    try:
        try:
            if zipfile.is_zipfile(archive):
                with zipfile.ZipFile(archive) as z:
                    names = z.namelist()
                    _safe_members(names, tmp)
                    bad = z.testzip()
                    if bad is not None:
                        raise FetchError(f"archive {archive} is corrupt (member {bad} fails its CRC)")
                    z.extractall(tmp)
            else:
                with tarfile.open(archive) as t:
                    members = t.getmembers()
                    _safe_members([m.name for m in members], tmp)
                    if any(m.issym() or m.islnk() or m.isdev() for m in members):
                        raise FetchError(f"archive {archive} contains links or devices; refusing to extract")
                    t.extractall(tmp, filter="data")
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as e:
            raise FetchError(f"archive {archive} is truncated or corrupt ({type(e).__name__}: {e}); "
                             "it was removed, fetch again or replace the mirror copy") from e
        out = []
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                rel = p.relative_to(tmp)
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(p, dest / rel)
                out.append(str(rel))
        return out
    except FetchError:
        archive.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_dataset(entry: dict, raw_dir: str | os.PathLike, mirrors: Iterable[str | os.PathLike]) -> dict:
    """Fetch every file of a real dataset entry into raw_dir; write raw_dir/manifest.json last."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    roots = mirror_roots(mirrors)
    files = {}
    for spec in tqdm(entry["files"], desc=f"fetch {entry['name']}", unit="file", disable=None):
        rec = fetch_file(spec, entry, raw_dir, roots)
        if spec.get("extract"):
            rec["members"] = extract(raw_dir / spec["name"], raw_dir)
        if rec.get("sha256_recorded_on_first_fetch"):  # only once it is known to be whole (extracted)
            record_hash(raw_dir.parent, entry["name"], spec["name"], rec["sha256"])
            print(f"WARNING: {entry['name']}/{spec['name']} has no published sha256 (config/datasets.yaml), so this "
                  f"first copy could not be verified: its sha256 {rec['sha256']} is now recorded in "
                  f"{raw_dir.parent / RECORDED} and every later fetch must match it. Check the file against its "
                  f"source, then paste the hash into config/datasets.yaml.", file=sys.stderr)
        files[spec["name"]] = rec
    manifest = {"dataset": entry["name"], "files": files}
    write_json(raw_dir / "manifest.json", manifest)
    return manifest
