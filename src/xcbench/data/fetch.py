"""Fetching raw datasets: local mirrors first, then direct downloads; sha256-verified.

A dataset entry of `config/datasets.yaml` names its files (`files:`), and may name other layouts of
the same data (`alternatives:`: another publisher's files, another text format). For every file:
  1. `$XCBENCH_MIRROR/<mirror_dir>/<name>`            (environment variable, if set)
  2. `<mirror>/<mirror_dir>/<name>` for each folder in `data.mirrors` of config/config.yaml
  3. each of its `urls`, downloaded with a progress bar: the file itself, or `{url, member}`, the
     member of a zip or tar archive (GroupLens' `ml-100k.zip`, Mikolov's `simple-examples.tgz`),
     downloaded once per fetch however many of its members are used.
Mirrors are tried for every layout before any download, so a mirror copy of any layout wins; the
layout fetched is recorded in `manifest.json` (`layout`: 0 the entry's own, i its i-th alternative)
and `prepare` reads that one (`layout_of`). A file with no URL but a `page` is a manual download:
`manual_steps` lists those before any job runs.

Every candidate is copied or downloaded to a temporary file beside the target, its sha256 is
checked, and only then is it renamed into `data/raw/<dataset>/`. A download that is an HTML page
is refused whatever its hash. Archives (`extract: true`) are unpacked into a temporary folder
(data/archives.py); a member whose path would land outside the target folder is refused, and a truncated
archive is reported and removed. Where the entry gives no sha256 (the large XC archives, ml-10m.zip, the SNAP
logs, LIBSVM's files: their sources publish none), the first fetch's hash is recorded in
`data/raw/sha256-recorded.tsv` with a loud warning (trust on first use), and every later fetch is
checked against it; the hash can then be pasted into datasets.yaml.

`$XCBENCH_URL_MAP` (`https://host=http://127.0.0.1:8000/host;...`) rewrites URL prefixes before a
download: a mirror of the publishers' layouts, or the test that rehearses a fresh machine.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Iterable

from tqdm import tqdm

from xcbench.data.archives import FetchError, copy_member, extract
from xcbench.io import atomic_path, sha256_of, write_json, write_text

MIRROR_ENV = "XCBENCH_MIRROR"
URL_MAP_ENV = "XCBENCH_URL_MAP"
URL_TIMEOUT_S = 30


def mirror_roots(mirrors: Iterable[str | os.PathLike]) -> list[Path]:
    roots = [Path(m) for m in mirrors]
    env = os.environ.get(MIRROR_ENV)
    return ([Path(env)] if env else []) + roots


def url_map() -> list[tuple[str, str]]:
    """($XCBENCH_URL_MAP) prefix -> replacement pairs, longest prefix first."""
    pairs = [p.split("=", 1) for p in os.environ.get(URL_MAP_ENV, "").split(";") if "=" in p]
    return sorted(((a.strip(), b.strip()) for a, b in pairs), key=lambda ab: -len(ab[0]))


def _mapped(url: str) -> str:
    return next((new + url[len(old):] for old, new in url_map() if url.startswith(old)), url)


def _looks_like_html(head: bytes) -> bool:
    return head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))


def _download(url: str, dest: Path) -> None:
    with urllib.request.urlopen(_mapped(url), timeout=URL_TIMEOUT_S) as resp:  # noqa: S310 (URLs of datasets.yaml)
        total = int(resp.headers.get("Content-Length") or 0) or None
        with open(dest, "wb") as f, tqdm(total=total, unit="B", unit_scale=True, desc=dest.name.lstrip("."),
                                         disable=None) as bar:
            while block := resp.read(1 << 20):
                f.write(block)
                bar.update(len(block))
    with open(dest, "rb") as f:
        if _looks_like_html(f.read(512)):
            raise FetchError(f"{url} served an HTML page, not the file (a moved download or a sign-in page)")


def _candidates(spec: dict, entry: dict, roots: list[Path], network: bool) -> list[tuple[str, str, str | None]]:
    """(kind, location, archive member) triples to try, in order: mirrors, then (network) the URLs."""
    sub = entry.get("mirror_dir", entry["name"])
    out = [("mirror", str(root / sub / spec["name"]), None) for root in roots]
    if network:
        out += [("url", u, None) if isinstance(u, str) else ("url", u["url"], u["member"])
                for u in spec.get("urls", [])]
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


def fetch_file(spec: dict, entry: dict, target_dir: Path, roots: list[Path], network: bool = True,
               archives: dict | None = None) -> dict:
    """Obtain one file of a dataset into target_dir; returns its manifest record. `archives` caches
    downloaded archives by URL for the other members of the same fetch."""
    name, want = spec["name"], spec.get("sha256")
    if not want:  # trust on first use: the hash of this file's first fetch, if any
        want = recorded_hashes(target_dir.parent).get((entry["name"], name))
    target = target_dir / name
    if target.exists() and want and sha256_of(target) == want:
        return {"sha256": want, "source": "cached", "bytes": target.stat().st_size}
    archives = {} if archives is None else archives
    tried = []
    for kind, loc, member in _candidates(spec, entry, roots, network):
        if kind == "mirror" and not Path(loc).is_file():
            tried.append(f"mirror {loc}: not there")
            continue
        where = f"{kind} {loc}" + (f" (member {member})" if member else "")
        try:
            with atomic_path(target) as tmp:
                if kind == "mirror":
                    shutil.copyfile(loc, tmp)
                elif member:
                    if loc not in archives:
                        archives[loc] = Path(tempfile.mkdtemp(prefix=".archive-", dir=target_dir)) / Path(loc).name
                        _download(loc, archives[loc])
                    copy_member(archives[loc], member, tmp)
                else:
                    _download(loc, tmp)
                got = sha256_of(tmp)
                if want and got != want:
                    recorded = ("config/datasets.yaml" if spec.get("sha256")
                                else f"{target_dir.parent / RECORDED}, recorded at its first fetch")
                    raise FetchError(f"sha256 mismatch: expected {want} ({recorded}), got {got} (a corrupt or "
                                     "different file; the copy was discarded)")
            return {"sha256": got, "source": loc + (f"#{member}" if member else ""),
                    "bytes": target.stat().st_size, **({} if want else {"sha256_recorded_on_first_fetch": True})}
        except FetchError as e:  # a bad copy: warn, name it, and try the next source
            print(f"warning: {entry['name']}: {where} does not verify ({e}); trying the next source "
                  "(replace or delete that copy)", file=sys.stderr)
            tried.append(f"{where}: {e}")
        except (OSError, ValueError) as e:  # URLError is an OSError
            archives.pop(loc, None)
            tried.append(f"{where}: {e}")
    raise FetchError(f"could not obtain {name}.\n      tried:\n        " + "\n        ".join(tried))


def _fix(entry: dict) -> str:
    """What a person does when no layout of the dataset can be had."""
    lines = []
    for lay in layouts(entry):
        sub = lay.get("mirror_dir", lay["name"])
        for spec in lay.get("files", []):
            src = spec.get("page") or ", ".join(u if isinstance(u, str) else u["url"] for u in spec.get("urls", []))
            lines.append(f"{spec['name']} from {src or '(no source known)'} into <mirror>/{sub}/")
    return ("  fix: put the files of one layout in a mirror folder, <mirror> being $" + MIRROR_ENV +
            " or a folder of data.mirrors (config/config.yaml; pass --config 'data={mirrors: [...]}'):\n    " +
            "\n    ".join(lines))


def layouts(entry: dict) -> list[dict]:
    """The entry's own layout, then each of its alternatives (overriding the keys it names)."""
    own = {k: v for k, v in entry.items() if k != "alternatives"}
    return [own] + [{**own, **alt} for alt in entry.get("alternatives", [])]


def layout_of(entry: dict, raw_dir: str | os.PathLike) -> dict:
    """The layout that fetch put in raw_dir: the one its manifest.json records; for a manifest written before
    layouts were recorded, the first layout whose files it lists; else the entry's own."""
    manifest = Path(raw_dir) / "manifest.json"
    man = json.loads(manifest.read_text(encoding="utf-8")) if manifest.exists() else {}
    lays = layouts(entry)
    if "layout" in man:
        return lays[man["layout"]]
    have = set(man.get("files", {}))
    return next((lay for lay in lays if have and {f["name"] for f in lay.get("files", [])} <= have), lays[0])


def manual_steps(entry: dict, mirrors: Iterable[str | os.PathLike]) -> list[str]:
    """Files a person must download by hand: none when some layout's files are each in a mirror or
    downloadable; else the first layout's files that are neither, with the page and the target folder."""
    roots = mirror_roots(mirrors)
    missing = []
    for lay in layouts(entry):
        sub = lay.get("mirror_dir", lay["name"])
        lacking = [f for f in lay.get("files", [])
                   if not f.get("urls") and not any((r / sub / f["name"]).is_file() for r in roots)]
        if not lacking:
            return []
        missing.append([f"{entry['name']}: {f['name']}: download it from {f.get('page', '(no page known)')} "
                        f"and put it in {roots[0] / sub if roots else '<mirror>/' + sub}/" for f in lacking])
    return missing[0] if missing else []


def steps_before_fetch(entry: dict, raw_dir: str | os.PathLike, mirrors: Iterable[str | os.PathLike]) -> list[str]:
    """`manual_steps`, or none where there is nothing to fetch: a generated set (no files) or one already fetched
    into raw_dir (its manifest.json, written last). What the DAG's first lines and the cost plan's targets ask."""
    if not entry.get("files") or (Path(raw_dir) / "manifest.json").exists():
        return []
    return manual_steps(entry, mirrors)


def fetch_dataset(entry: dict, raw_dir: str | os.PathLike, mirrors: Iterable[str | os.PathLike]) -> dict:
    """Fetch every file of one layout of a real dataset entry into raw_dir (mirrors of every layout
    first, then downloads); write raw_dir/manifest.json last."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    roots = mirror_roots(mirrors)
    archives: dict[str, Path] = {}
    tried = []
    try:
        for network in (False, True):
            for i, lay in enumerate(layouts(entry)):
                try:
                    files = {spec["name"]: fetch_file(spec, lay, raw_dir, roots, network, archives)
                             for spec in tqdm(lay["files"], desc=f"fetch {entry['name']}", unit="file", disable=None)}
                except FetchError as e:
                    tried.append(f"layout {i} ({lay.get('format')}{', downloads' if network else ', mirrors'}): {e}")
                    continue
                return _finish(entry, lay, i, raw_dir, files)
    finally:
        for path in archives.values():
            shutil.rmtree(path.parent, ignore_errors=True)
    raise FetchError(f"dataset {entry['name']!r}: no layout could be obtained.\n  " + "\n  ".join(tried) +
                     "\n" + _fix(entry))


def _finish(entry: dict, lay: dict, i: int, raw_dir: Path, files: dict) -> dict:
    for spec in lay["files"]:
        rec = files[spec["name"]]
        if spec.get("extract"):
            rec["members"] = extract(raw_dir / spec["name"], raw_dir)
        if rec.get("sha256_recorded_on_first_fetch"):  # only once it is known to be whole (extracted)
            record_hash(raw_dir.parent, entry["name"], spec["name"], rec["sha256"])
            print(f"WARNING: {entry['name']}/{spec['name']} has no published sha256 (config/datasets.yaml), so this "
                  f"first copy could not be verified: its sha256 {rec['sha256']} is now recorded in "
                  f"{raw_dir.parent / RECORDED} and every later fetch must match it. Check the file against its "
                  f"source, then paste the hash into config/datasets.yaml.", file=sys.stderr)
    manifest = {"dataset": entry["name"], "layout": i, "format": lay.get("format"), "files": files}
    write_json(raw_dir / "manifest.json", manifest)
    return manifest
