"""A fresh machine, rehearsed without internet: every real dataset of the quick scale is downloaded over
HTTP from a local server laid out as its publishers lay it out (hosts as folders, archives rebuilt with
the same members, LIBSVM's files converted from the XC ones as LIBSVM converts them), with no mirror,
and prepares to the arrays the mirror gives. Broken servers (a page instead of the file, an archive
without its member, a changed byte) fail the fetch. And a static check of the catalogue's URLs."""

import bz2
import functools
import http.server
import io
import shutil
import tarfile
import threading
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from xcbench.catalogue import load_datasets
from xcbench.config import load_experiment, resolve_experiment
from xcbench.data.datasets import load_npz, prepare
from xcbench.data.fetch import URL_MAP_ENV, FetchError, fetch_dataset, layouts

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "config" / "experiments"
CATALOGUE = load_datasets()
pytestmark = pytest.mark.skipif(not (SHARED / "MANIFEST.tsv").exists(), reason="no ../shared/data mirror")


@functools.lru_cache(maxsize=None)
def quick_datasets() -> tuple[str, ...]:
    """The real (fetched, not generated) datasets that the quick scale's experiments train on."""
    from xcbench.run import expected_runs

    names = set()
    for f in sorted(EXPERIMENTS.glob("*/*.yaml")):
        names |= {d for d, _, _ in expected_runs(resolve_experiment(load_experiment(f), "quick"))}
    return tuple(sorted(d for d in names if CATALOGUE[d].get("files")))


def _xc_to_libsvm(xc: bytes) -> bytes:
    """What LIBSVM's page says it did to XC files: drop the header line, count features from 1."""
    out = []
    for line in xc.decode().splitlines()[1:]:
        toks = line.split()
        lab = [] if (not toks or line[0].isspace() or ":" in toks[0]) else [toks.pop(0)]
        out.append(" ".join(lab + [f"{int(k) + 1}:{v}" for k, v in (t.split(":") for t in toks)]))
    return ("\n".join(out) + "\n").encode()


def published(dataset: str, name: str) -> bytes:
    """The bytes a publisher serves for one file of a download layout, made from the mirror."""
    lay = layouts(CATALOGUE[dataset])[0]
    folder = SHARED / lay.get("mirror_dir", dataset)
    made = {
        ("movielens-100k", "u.data"): lambda: b"".join((folder / "ml-100k.inter").read_bytes().splitlines(True)[1:]),
        ("bibtex", "bibtex.bz2"): lambda: bz2.compress(_xc_to_libsvm((folder / "Bibtex_data.txt").read_bytes())),
        ("delicious", "delicious.bz2"): lambda: bz2.compress(b"".join(
            _xc_to_libsvm((folder / f"Delicious_{s}.txt").read_bytes()) for s in ("train", "test"))),
    }
    return made[(dataset, name)]() if (dataset, name) in made else (folder / name).read_bytes()


def publisher_tree(root: Path, datasets: tuple[str, ...], drop_first_url: bool = False) -> Path:
    """root/<host>/<path> for every URL of these datasets: files, and archives holding their members."""
    archives: dict[str, dict[str, bytes]] = {}
    for d in datasets:
        for lay in layouts(CATALOGUE[d]):
            for spec in lay["files"]:
                for u in spec.get("urls", [])[1 if drop_first_url else 0:]:
                    url, member = (u, None) if isinstance(u, str) else (u["url"], u["member"])
                    if member:
                        archives.setdefault(url, {})[member] = published(d, spec["name"])
                    else:
                        _put(root, url, published(d, spec["name"]))
    for url, members in archives.items():
        _put(root, url, _archive(url, members))
    return root


@pytest.fixture(scope="module")
def www(tmp_path_factory) -> Path:
    """The publishers' tree of every quick dataset, built once (tests that break it work on a copy)."""
    return publisher_tree(tmp_path_factory.mktemp("www"), quick_datasets())


def _put(root: Path, url: str, data: bytes) -> None:
    parts = urlsplit(url)
    path = root / parts.netloc / parts.path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _archive(url: str, members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    if url.endswith(".zip"):
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for m, data in members.items():
                z.writestr(m, data)
    else:
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            for m, data in members.items():
                info = tarfile.TarInfo("./" + m)  # Mikolov's tarball names its members ./simple-examples/...
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def serve(tmp_path, monkeypatch):
    """Serve a folder on 127.0.0.1 and map every catalogue host onto it ($XCBENCH_URL_MAP); no mirror."""
    servers = []

    def start(root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        hosts = sorted({f"{p.scheme}://{p.netloc}" for p in map(urlsplit, _all_urls())})
        base = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.setenv(URL_MAP_ENV, ";".join(f"{h}={base}/{urlsplit(h).netloc}" for h in hosts))
        monkeypatch.delenv("XCBENCH_MIRROR", raising=False)

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output to the test's own
        pass


def _all_urls() -> list[str]:
    return [u if isinstance(u, str) else u["url"] for e in CATALOGUE.values() for lay in layouts(e)
            for f in lay.get("files", []) for u in f.get("urls", [])]


def _same_arrays(a_path: Path, b_path: Path) -> None:
    a, _ = load_npz(a_path)
    b, _ = load_npz(b_path)
    assert sorted(a) == sorted(b)
    for k in a:
        if hasattr(a[k], "tocsr"):
            assert a[k].shape == b[k].shape and (a[k] != b[k]).nnz == 0, k
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_quick_datasets_are_the_nine_real_ones():
    assert quick_datasets() == ("bibtex", "delicious", "movielens-100k", "ptb", "seqrec-beauty", "seqrec-lastfm",
                                "seqrec-sports", "seqrec-video", "wikitext-2")


def test_fresh_machine_fetches_and_prepares_every_quick_dataset_over_http(tmp_path, serve, www):
    serve(www)
    for d in quick_datasets():
        entry = CATALOGUE[d]
        man = fetch_dataset(entry, tmp_path / "http" / d, [])  # no mirror at all
        assert all(r["source"].startswith("http") for r in man["files"].values()), (d, man)
        prepare(entry, tmp_path / "http" / d, tmp_path / "http" / f"{d}.npz")
        fetch_dataset(entry, tmp_path / "mirror" / d, [SHARED])  # what the quick DAG uses here
        prepare(entry, tmp_path / "mirror" / d, tmp_path / "mirror" / f"{d}.npz")
        _same_arrays(tmp_path / "http" / f"{d}.npz", tmp_path / "mirror" / f"{d}.npz")


def test_second_sources_serve_when_the_first_is_gone(tmp_path, serve):
    """PTB from Mikolov's tarball and WikiText-2 from the second zip when the first URL of each is gone."""
    serve(publisher_tree(tmp_path / "www", ("ptb", "wikitext-2"), drop_first_url=True))
    for d in ("ptb", "wikitext-2"):
        man = fetch_dataset(CATALOGUE[d], tmp_path / d, [])
        assert all("#" in r["source"] for r in man["files"].values())  # an archive member, not the first URL


@pytest.mark.parametrize("fault, match", [("page", "HTML page"), ("member", "no member"), ("byte", "sha256 mismatch")])
def test_a_broken_publisher_fails_the_fetch(tmp_path, serve, www, fault, match):
    www = Path(shutil.copytree(www, tmp_path / "www"))
    if fault == "page":  # a moved download answering with a page, for a file whose hash is recorded on first use
        dataset, target = "bibtex", next(www.rglob("bibtex.bz2"))
        target.write_bytes(b"<!DOCTYPE html>\n<html><body>Moved</body></html>\n")
    elif fault == "member":
        dataset, target = "movielens-100k", next(www.rglob("ml-100k.zip"))
        target.write_bytes(_archive(".zip", {"ml-100k/u.item": b"1|Toy Story\n"}))
    else:
        dataset, target = "seqrec-beauty", next(www.rglob("Beauty.txt"))
        target.write_bytes(target.read_bytes().replace(b"1", b"2", 1))
    serve(www)
    with pytest.raises(FetchError, match=match):
        fetch_dataset(CATALOGUE[dataset], tmp_path / "raw" / dataset, [])
    assert not (tmp_path / "raw" / dataset / "manifest.json").exists()


def test_every_url_is_a_file_not_a_page():
    """No `urls:` entry is a page (.html), a folder (/) or a bare host; pages go to `page:`."""
    for url in _all_urls():
        parts = urlsplit(url)
        assert parts.scheme in ("http", "https", "ftp") and parts.netloc, url
        assert parts.path not in ("", "/") and not parts.path.endswith(("/", ".html", ".htm", ".php")), url


def test_quick_scale_needs_no_manual_download():
    from xcbench.data.fetch import manual_steps

    for d in quick_datasets():
        assert manual_steps(CATALOGUE[d], []) == [], d
