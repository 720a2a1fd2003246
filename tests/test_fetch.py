"""Fetching: mirrors, sha256 checks, archives (truncated, escaping members), missing data."""

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from xcbench.data.archives import FetchError, extract
from xcbench.data.fetch import fetch_dataset

UNREACHABLE = "http://127.0.0.1:9/nothing-listens-here/data.txt"  # closed port: refused at once


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _entry(name, files, **kw):
    return {"name": name, "files": files, **kw}


def _leftovers(d):
    return sorted(p.name for p in d.rglob("*") if p.name.startswith("."))


def test_fetch_from_mirror_verifies_and_writes_manifest(tmp_path):
    mirror = tmp_path / "mirror" / "ds"
    mirror.mkdir(parents=True)
    (mirror / "a.txt").write_bytes(b"hello")
    out = tmp_path / "raw"
    man = fetch_dataset(_entry("ds", [{"name": "a.txt", "sha256": _sha(b"hello"), "urls": [UNREACHABLE]}]),
                        out, [tmp_path / "mirror"])
    assert (out / "a.txt").read_bytes() == b"hello"
    assert man["files"]["a.txt"]["sha256"] == _sha(b"hello")
    assert (out / "manifest.json").exists()


def test_env_mirror_comes_first(tmp_path, monkeypatch):
    for name, content in (("env", b"from-env"), ("cfg", b"from-config")):
        (tmp_path / name / "ds").mkdir(parents=True)
        (tmp_path / name / "ds" / "a.txt").write_bytes(content)
    monkeypatch.setenv("XCBENCH_MIRROR", str(tmp_path / "env"))
    fetch_dataset(_entry("ds", [{"name": "a.txt", "sha256": None}]), tmp_path / "raw", [tmp_path / "cfg"])
    assert (tmp_path / "raw" / "a.txt").read_bytes() == b"from-env"


def test_unknown_sha_is_recorded(tmp_path, capsys):
    (tmp_path / "m" / "ds").mkdir(parents=True)
    (tmp_path / "m" / "ds" / "a.txt").write_bytes(b"x")
    man = fetch_dataset(_entry("ds", [{"name": "a.txt", "sha256": None}]), tmp_path / "raw", [tmp_path / "m"])
    assert man["files"]["a.txt"]["sha256"] == _sha(b"x")
    assert man["files"]["a.txt"]["sha256_recorded_on_first_fetch"]
    assert _sha(b"x") in capsys.readouterr().err


def test_wrong_sha256_is_refused_and_nothing_left(tmp_path):
    (tmp_path / "m" / "ds").mkdir(parents=True)
    (tmp_path / "m" / "ds" / "a.txt").write_bytes(b"tampered")
    out = tmp_path / "raw"
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch_dataset(_entry("ds", [{"name": "a.txt", "sha256": _sha(b"original")}]), out, [tmp_path / "m"])
    assert not (out / "a.txt").exists() and not (out / "manifest.json").exists()
    assert _leftovers(out) == []


def test_corrupt_first_mirror_falls_back_to_a_good_one_with_a_warning(tmp_path, capsys):
    for name, content in (("bad", b"tampered"), ("good", b"original")):
        (tmp_path / name / "ds").mkdir(parents=True)
        (tmp_path / name / "ds" / "a.txt").write_bytes(content)
    out = tmp_path / "raw"
    man = fetch_dataset(_entry("ds", [{"name": "a.txt", "sha256": _sha(b"original")}]), out,
                        [tmp_path / "bad", tmp_path / "good"])
    assert (out / "a.txt").read_bytes() == b"original" and man["files"]["a.txt"]["source"].startswith(str(tmp_path / "good"))
    err = capsys.readouterr().err
    assert "warning" in err and str(tmp_path / "bad" / "ds" / "a.txt") in err and "sha256 mismatch" in err
    assert _leftovers(out) == []


def test_missing_dataset_no_mirror_no_network(tmp_path):
    out = tmp_path / "raw"
    with pytest.raises(FetchError) as e:
        fetch_dataset(_entry("bigdata", [{"name": "d.txt", "sha256": None, "urls": [UNREACHABLE]}]), out,
                      [tmp_path / "nomirror"])
    msg = str(e.value)
    assert "bigdata" in msg and UNREACHABLE in msg
    assert "XCBENCH_MIRROR" in msg and "data.mirrors" in msg
    assert not (out / "d.txt").exists() and _leftovers(out) == []


def _zip_bytes(members: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    return buf.getvalue()


def test_archive_is_extracted(tmp_path):
    data = _zip_bytes({"ds/train.txt": b"1 1 1\n0 0:1\n" * 50})
    (tmp_path / "m" / "ds").mkdir(parents=True)
    (tmp_path / "m" / "ds" / "ds.zip").write_bytes(data)
    out = tmp_path / "raw"
    man = fetch_dataset(_entry("ds", [{"name": "ds.zip", "sha256": _sha(data), "extract": True}]), out,
                        [tmp_path / "m"])
    assert (out / "ds" / "train.txt").exists()
    assert man["files"]["ds.zip"]["members"] == ["ds/train.txt"]


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_truncated_archive_is_reported_and_removed(tmp_path, kind):
    if kind == "zip":
        data = _zip_bytes({"ds/train.txt": bytes(range(256)) * 400})
    else:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            payload = bytes(range(256)) * 400
            info = tarfile.TarInfo("ds/train.txt")
            info.size = len(payload)
            t.addfile(info, io.BytesIO(payload))
        data = buf.getvalue()
    cut = data[: len(data) // 2]
    (tmp_path / "m" / "ds").mkdir(parents=True)
    (tmp_path / "m" / "ds" / f"ds.{kind}").write_bytes(cut)
    out = tmp_path / "raw"
    with pytest.raises(FetchError, match="truncated or corrupt"):
        fetch_dataset(_entry("ds", [{"name": f"ds.{kind}", "sha256": None, "extract": True}]), out, [tmp_path / "m"])
    assert not (out / f"ds.{kind}").exists(), "the bad archive must be removed"
    assert not (out / "ds").exists() and not (out / "manifest.json").exists()
    assert _leftovers(out) == []


def test_truncated_archive_with_known_sha_fails_on_hash(tmp_path):
    data = _zip_bytes({"a.txt": b"abc" * 1000})
    (tmp_path / "m" / "ds").mkdir(parents=True)
    (tmp_path / "m" / "ds" / "ds.zip").write_bytes(data[:100])
    with pytest.raises(FetchError, match="sha256 mismatch"):
        fetch_dataset(_entry("ds", [{"name": "ds.zip", "sha256": _sha(data), "extract": True}]), tmp_path / "raw",
                      [tmp_path / "m"])


@pytest.mark.parametrize("evil", ["../escape.txt", "/abs/escape.txt", "a/../../escape.txt"])
def test_escaping_members_are_refused(tmp_path, evil):
    arch = tmp_path / "evil.zip"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("ok.txt", b"fine")
        z.writestr(evil, b"bad")
    arch.write_bytes(buf.getvalue())
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(FetchError, match="outside"):
        extract(arch, dest)
    assert not (tmp_path / "escape.txt").exists() and list(dest.iterdir()) == []


def test_tar_links_are_refused(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("link")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        t.addfile(info)
    arch = tmp_path / "l.tar"
    arch.write_bytes(buf.getvalue())
    (tmp_path / "dest").mkdir()
    with pytest.raises(FetchError, match="links"):
        extract(arch, tmp_path / "dest")


def test_a_mirror_copy_of_any_layout_beats_a_download_and_prepare_reads_the_layout_fetched(tmp_path, monkeypatch):
    """Layout 0 has only a URL (here one that refuses), layout 1 is in the mirror: the mirror wins without
    touching the network, the manifest records layout 1, and layout_of hands prepare that layout."""
    from xcbench.data.fetch import layout_of, manual_steps, steps_before_fetch

    calls = []
    monkeypatch.setattr("xcbench.data.fetch._download", lambda url, dest: calls.append(url))
    (tmp_path / "m" / "ds").mkdir(parents=True)
    (tmp_path / "m" / "ds" / "b.inter").write_bytes(b"head\nrows\n")
    entry = _entry("ds", [{"name": "a.txt", "sha256": _sha(b"rows\n"), "urls": [UNREACHABLE]}], format="log",
                   alternatives=[{"files": [{"name": "b.inter", "sha256": _sha(b"head\nrows\n")}], "format": "inter"}])
    man = fetch_dataset(entry, tmp_path / "raw" / "ds", [tmp_path / "m"])
    assert calls == [] and man["layout"] == 1 and list(man["files"]) == ["b.inter"]
    assert layout_of(entry, tmp_path / "raw" / "ds")["format"] == "inter"
    man = tmp_path / "raw" / "ds" / "manifest.json"  # a manifest from before layouts were recorded
    man.write_text(json.dumps({"dataset": "ds", "files": {"b.inter": {}}}))
    assert layout_of(entry, tmp_path / "raw" / "ds")["format"] == "inter"
    assert manual_steps(entry, []) == []  # layout 0 is downloadable
    entry["files"][0] = {"name": "a.txt", "page": "https://example.org/get-it"}
    assert manual_steps(entry, [tmp_path / "m"]) == []  # layout 1 is in a mirror
    assert manual_steps(entry, []) == ["ds: a.txt: download it from https://example.org/get-it and put it in <mirror>/ds/"]
    assert steps_before_fetch(entry, tmp_path / "raw" / "ds", []) == []  # fetched: its manifest is there
    assert steps_before_fetch(entry, tmp_path / "raw" / "other", []) == manual_steps(entry, [])
    assert steps_before_fetch({"name": "gen"}, tmp_path / "raw" / "gen", []) == []  # generated: nothing to fetch


def test_an_archive_member_is_downloaded_once_for_all_its_files(tmp_path, monkeypatch):
    data = _zip_bytes({"pkg/a.txt": b"A", "pkg/b.txt": b"B"})
    calls = []

    def fake(url, dest):
        calls.append(url)
        dest.write_bytes(data)

    monkeypatch.setattr("xcbench.data.fetch._download", fake)
    url = "https://example.org/pkg.zip"
    entry = _entry("ds", [{"name": n, "sha256": _sha(n.upper()[:1].encode()), "urls": [{"url": url, "member": f"pkg/{n}"}]}
                          for n in ("a.txt", "b.txt")])
    man = fetch_dataset(entry, tmp_path / "raw", [])
    assert calls == [url] and (tmp_path / "raw" / "b.txt").read_bytes() == b"B"
    assert man["files"]["a.txt"]["source"] == f"{url}#pkg/a.txt" and _leftovers(tmp_path / "raw") == []
