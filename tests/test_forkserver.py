"""The fork server of train jobs (forkserver.py): a served job writes what a fresh process writes, where
the client asked, returns its exit code and streams, and dies with its client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from xcbench import forkserver

pytestmark = pytest.mark.skipif(not hasattr(__import__("socket"), "send_fds"), reason="needs socket.send_fds")


def _train(cwd, npz, out, *extra, served="1"):
    env = {**os.environ, forkserver.FLAG: served}
    cmd = [sys.executable, "-m", "xcbench", "train", "--experiment", "config/experiments/midx/table4.yaml",
           "--scale", "tiny", "--dataset", "synthetic-lm-tiny", "--method", "lstm_full", "--seed", "0",
           "--processed", str(npz), "--device", "cpu", "--threads", "1", "--out", out, "--no-reuse", *extra]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _jobs() -> list[int]:
    """The pids of the jobs the tests' server forked (its log)."""
    log = forkserver.socket_dir() / f"{forkserver.server_key({**os.environ, forkserver.FLAG: '1'})}.log"
    return [int(ln.split()[-1]) for ln in log.read_text().splitlines() if " job " in ln] if log.exists() else []


@pytest.fixture()
def workdir(tmp_path, prepared):
    from conftest import REPO

    (tmp_path / "config").symlink_to(REPO / "config")
    return tmp_path, prepared("synthetic-lm-tiny")[0]


def test_a_served_job_writes_what_a_fresh_process_writes(workdir):
    cwd, npz = workdir
    fresh = _train(cwd, npz, "fresh", served="0")
    assert fresh.wait(300) == 0, fresh.stderr.read()
    (cwd / "elsewhere").mkdir()
    (cwd / "elsewhere" / "config").symlink_to(cwd / "config")
    assert _train(cwd / "elsewhere", npz, "x", "--method", "none").wait(300) == 1   # a server started elsewhere
    before = set(_jobs())
    runs = [_train(cwd, npz, out) for out in ("a", "b")]
    for p in runs:
        assert p.wait(300) == 0, p.stderr.read()
        assert "results: " in p.stdout.read() and "epoch 1/" in p.stderr.read()   # the client's streams
    assert len(set(_jobs()) - before) == 2
    want = json.loads((cwd / "fresh" / "metrics.json").read_text())["metrics"]
    for out in ("a", "b"):   # relative --out: the client's working directory
        assert json.loads((cwd / out / "metrics.json").read_text())["metrics"] == want
        assert (cwd / out / "history.csv").read_text().split("\n")[1].split(",")[2] == \
            (cwd / "fresh" / "history.csv").read_text().split("\n")[1].split(",")[2]   # epoch 1's training loss


def test_a_served_jobs_error_and_exit_code_reach_the_client(workdir):
    cwd, npz = workdir
    p = _train(cwd, npz, "x", "--method", "no_such_method")
    assert p.wait(300) == 1
    assert "no_such_method" in p.stderr.read()
    assert _jobs()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_served_job_ends_with_its_client(workdir, sig):
    """SIGTERM is forwarded to the job; after SIGKILL (nothing forwarded) the job sees its client gone."""
    cwd, npz = workdir
    fifo = cwd / "never_written.npz"
    os.mkfifo(fifo)   # the job blocks reading its dataset
    before = set(_jobs())
    p = _train(cwd, fifo, "y")
    deadline = time.monotonic() + 120
    while not set(_jobs()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    (pid,) = set(_jobs()) - before
    time.sleep(0.5)
    os.kill(pid, 0)   # running
    p.send_signal(sig)
    p.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"job {pid} outlived its client")


def test_server_key_follows_code_and_import_time_environment(tmp_path, monkeypatch):
    (tmp_path / "m.py").write_text("x = 1\n")
    monkeypatch.setattr(forkserver, "PACKAGE", tmp_path)
    key = forkserver.server_key({"HOME": "/h"})
    assert forkserver.server_key({"HOME": "/other"}) == key   # read by the job, passed to it
    assert forkserver.server_key({"HOME": "/h", "OMP_NUM_THREADS": "4"}) != key
    assert forkserver.server_key({"HOME": "/h", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}) != key  # read at exec
    os.utime(tmp_path / "m.py", ns=(0, 1))
    assert forkserver.server_key({"HOME": "/h"}) != key   # an edited module: a new server


def test_other_verbs_and_the_flag_off_run_in_process(monkeypatch):
    monkeypatch.setenv(forkserver.FLAG, "1")
    assert forkserver.served(["fetch", "--help"]) is None
    monkeypatch.setenv(forkserver.FLAG, "0")
    assert forkserver.served(["train", "--help"]) is None
    monkeypatch.setenv(forkserver.FLAG, "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert forkserver.served(["train", "--help"]) is None


def test_a_server_that_cannot_be_had_leaves_the_job_to_the_caller(monkeypatch, tmp_path):
    (tmp_path / "ro").mkdir(mode=0o500)
    monkeypatch.setenv(forkserver.FLAG, "1")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "ro" / "missing"))   # no socket folder can be made
    assert forkserver.served(["train", "--help"]) is None


def test_a_render_server_imports_no_torch():
    """Render, claims and report jobs have their own server, which, like them, never imports torch."""
    code = "import sys; from xcbench import forkserver; forkserver.warm('render'); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
    assert forkserver.server_key({}, "render") != forkserver.server_key({}, "train")


def test_a_server_that_closes_unanswered_leaves_the_job_to_the_caller(monkeypatch, tmp_path):
    """A server idling out as a client connects drops the connection before any child took the job."""
    import socket
    import threading

    monkeypatch.setenv(forkserver.FLAG, "1")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = forkserver.socket_dir() / f"{forkserver.server_key(os.environ, 'train')}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def drop():   # reads the whole request, then closes without a pid: no child took it
        conn, _ = srv.accept()
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        forkserver._recv_exact(conn, int.from_bytes(head, "big"))
        for fd in fds:
            os.close(fd)
        conn.close()

    t = threading.Thread(target=drop)
    t.start()
    assert forkserver.served(["train", "--help"]) is None
    t.join()
    srv.close()
