"""A fork server for xcbench's jobs: torch (or matplotlib) is imported once, and each job is a fork of it.

A tiny train job spends most of its life importing torch (80% of one job's profile). The tiny-scale DAG on
one core, beside two one-thread trainings: 131 train jobs took 1,003 s, 114 s of it training, and the DAG
1,343 s; with this server 92 s and 392 s, every trained metric and curve bit-identical (measured times and
peak memory differ). Render, claims and report jobs have a server of their own, without torch: their 70 jobs
took 68 s instead of 234 s, and the 271 files they write were byte-identical.

With XCBENCH_FORKSERVER=1 (the Snakefile sets it at tiny scale), `python -m xcbench train ...` (or render,
claims, report) becomes a thin client that imports no torch: it hands its arguments, working directory,
environment and standard streams (fd 0-2, passed over a Unix socket) to a server that has imported what such
a job imports, and the server forks a child that runs `cli.main(argv)` exactly as a fresh process would. The
client relays the exit code, forwards SIGINT/SIGTERM/SIGHUP to the child, and the child ends itself if its
client goes away, so Snakemake's job control still holds.

A forked job's peak resident memory reads lower than a fresh process's (tiny faces, Full: 218 MB against 276
MB): a fork starts from the server's resident pages, without the import's transient peak and with the
libraries' file pages faulted in only as used; at the quick scale it reads 58 MB lower to 44 MB higher, and the
peak above the job's start (`memory.peak_rss_above_start_bytes`) 16-118 MB higher (studies/fork_memory). The
memory columns of the quick and paper scales are therefore measured in fresh processes, and the server serves the
tiny scale (CI) unless asked.

A server serves one key: the kind of job (train, or render/claims/report), the interpreter, the package's
folder, the size and mtime of every module file (an edited method starts a new server rather than running
old code) and the environment variables read when torch and numpy load (thread pools, allocators). It exits
after IDLE_S seconds without a job. Anything that fails on the way (no Unix sockets, a server that does not
come up, an explicit OPENBLAS_NUM_THREADS other than 1, whose thread pool a fork would not carry) runs the
job in the client's own process instead, as before.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FLAG = "XCBENCH_FORKSERVER"
KINDS = {"train": "train", "render": "render", "claims": "render", "report": "render"}   # verb -> what its server imports
IDLE_S = 60.0
START_S = 120.0   # how long a client waits for a server it started to listen
IMPORT_ENV = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_", "TORCH", "PYTORCH_", "PYTHON", "LD_", "MALLOC_", "MPL",
              "GLIBC_TUNABLES")
PACKAGE = Path(__file__).resolve().parent


def server_key(environ: dict, kind: str = "train") -> str:
    """Which server may run this job: same kind, interpreter, code and import-time environment."""
    h = hashlib.sha256()
    for part in (kind, sys.executable, str(PACKAGE)):
        h.update(part.encode() + b"\0")
    for p in sorted(PACKAGE.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(PACKAGE)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    for k in sorted(k for k in environ if k.startswith(IMPORT_ENV)):
        h.update(f"{k}={environ[k]}\0".encode())
    return h.hexdigest()[:20]


def socket_dir() -> Path:
    d = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"xcbench-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def served(argv: list[str]) -> int | None:
    """Run `xcbench <argv>` in a fork of a warm server and return its exit code; None where this job is not
    for the server (flag off, another verb) or no server could be had: the caller then runs it itself."""
    if os.environ.get(FLAG) != "1" or not argv or argv[0] not in KINDS or not hasattr(socket, "send_fds"):
        return None
    if os.environ.get("OPENBLAS_NUM_THREADS", "1") != "1":
        return None
    try:   # nothing has run yet: any failure here leaves the job to the caller
        cwd = os.getcwd()
        body = json.dumps({"argv": argv, "cwd": cwd, "env": dict(os.environ)}).encode()
        kind = KINDS[argv[0]]
        conn = _connect_or_start(socket_dir() / f"{server_key(os.environ, kind)}.sock", cwd, kind)
    except (OSError, ValueError):
        return None
    with conn:
        return _client(conn, body)


def _connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        raise
    return s


def _connect_or_start(path: Path, cwd: str, kind: str) -> socket.socket:
    try:
        return _connect(path)
    except OSError:
        pass
    with open(path.with_suffix(".lock"), "w") as lock:   # one client starts the server, the others wait here
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _connect(path)
        except OSError:
            pass
        with open(path.with_suffix(".log"), "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "xcbench.forkserver", str(path), kind], cwd=cwd,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                return _connect(path)
            except OSError:
                time.sleep(0.05)
        raise OSError(f"no fork server at {path}")


def _client(conn: socket.socket, body: bytes) -> int | None:
    """The job's exit code; None where no child took the job (a server that idled out as this client
    connected closes the connection unanswered): the caller then runs it."""
    try:
        socket.send_fds(conn, [len(body).to_bytes(8, "big")], [0, 1, 2])
        conn.sendall(body)
        reader = conn.makefile("rb")
        line = reader.readline()
    except OSError:
        return None
    if not line.strip():
        return None
    pid, forwarded = int(line), []

    def forward(signum, _frame):
        forwarded.append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    line = reader.readline()
    return int(line) if line.strip() else 128 + (forwarded[-1] if forwarded else 1)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("client went away")
        buf += chunk
    return buf


def _child(conn: socket.socket) -> None:
    """In the fork: take the client's streams, directory and environment, run the CLI, report the code."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    req = json.loads(_recv_exact(conn, int.from_bytes(head, "big")))
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    unbuffered = bool(req["env"].get("PYTHONUNBUFFERED"))
    sys.stdout = open(1, "w", buffering=1 if unbuffered or os.isatty(1) else -1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.path[0] = req["cwd"]
    sys.argv = [sys.argv[0], *req["argv"]]
    conn.sendall(f"{os.getpid()}\n".encode())
    threading.Thread(target=_end_with_client, args=(conn,), daemon=True).start()
    from xcbench.cli import main

    try:
        rc = main(req["argv"])
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - a fresh process would print it and exit 1 too
        import traceback

        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    conn.sendall(f"{rc}\n".encode())
    os._exit(rc)


def _end_with_client(conn: socket.socket) -> None:
    """The client sends nothing after its request: end of stream means it is gone (killed), and so is this job."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def warm(kind: str) -> None:
    """Import what a job of this kind imports. `train`: torch, the training code and every registered method.
    `render` (render, claims, report: no torch, as in a fresh render job): the renderers and matplotlib on Agg."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # as cmd_train sets them, before numpy loads
    from xcbench.blas import pin_numpy_blas

    pin_numpy_blas()
    import xcbench.cli  # noqa: F401

    if kind == "train":
        import xcbench.train  # noqa: F401
        from xcbench.registry import _import_builtin_modules

        _import_builtin_modules()   # what a job's first registry look-up imports
    else:
        from xcbench.registry import RENDERERS
        from xcbench.reporting.style import _pyplot

        RENDERERS.names()
        _pyplot()


def serve(path: Path, kind: str) -> None:
    """Listen at `path` with `kind`'s imports done, fork one child per job; exit after IDLE_S idle seconds."""
    warm(kind)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children are reaped by the kernel
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(tmp))
    srv.listen(64)
    os.replace(tmp, path)
    ino = path.stat().st_ino
    srv.settimeout(IDLE_S)
    try:
        while True:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                break
            conn.settimeout(None)
            pid = os.fork()
            if pid == 0:
                srv.close()
                try:
                    _child(conn)
                finally:
                    os._exit(1)
            conn.close()
            print(f"{time.strftime('%H:%M:%S')} job {pid}", file=sys.stderr, flush=True)
    finally:   # a client waiting on the lock meanwhile starts a new server: at worst two serve for a while
        if path.exists() and path.stat().st_ino == ino:
            for p in (path, path.with_suffix(".log"), path.with_suffix(".lock")):
                p.unlink(missing_ok=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2])
