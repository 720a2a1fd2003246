"""Zip and tar archives of the datasets' publishers: one member copied out (`copy_member`: GroupLens' ml-100k.zip,
Mikolov's simple-examples.tgz), or the whole archive unpacked (`extract`) into a temporary folder beside the target
and moved in, refusing members that would land outside it, links and devices; a truncated or corrupt archive is
reported (and, when extracting, removed). Every failure is a FetchError (data/fetch.py)."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path


class FetchError(RuntimeError):
    """A dataset file that could not be obtained or verified."""


def copy_member(archive: Path, member: str, dest: Path) -> None:
    """Copy one member of a zip or tar archive to dest ('./' prefixes ignored)."""
    want = member.removeprefix("./")
    try:
        with (zipfile.ZipFile(archive) if zipfile.is_zipfile(archive) else tarfile.open(archive)) as a:
            if isinstance(a, zipfile.ZipFile):
                names, read = {n.removeprefix("./"): n for n in a.namelist()}, a.open
            else:
                names, read = {m.name.removeprefix("./"): m for m in a.getmembers() if m.isfile()}, a.extractfile
            if want not in names:
                raise FetchError(f"archive has no member {member!r} (it has {len(names)}: "
                                 f"{', '.join(sorted(names)[:8])}...)")
            with read(names[want]) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError) as e:
        raise FetchError(f"archive is truncated or corrupt ({type(e).__name__}: {e})") from e


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
