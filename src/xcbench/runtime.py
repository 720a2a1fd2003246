"""Process settings of a compute job (`xcbench train`, `features`): torch's thread count and glibc's
allocator thresholds. Called by the CLI verbs only, never on import (importing xcbench changes no
global state).

Allocator: glibc serves every block above M_MMAP_THRESHOLD (128 KiB, rising adaptively to 32 MiB)
with a fresh mmap and returns it with munmap, and trims the heap top above M_TRIM_THRESHOLD. A
training step allocates and frees tensors of 10-400 MB (PTB: (256 * 35, 10^4) logits), so each step
page-faults its whole working set again: measured on the 2-core CPU (PTB LSTM, Uniform, batch 256,
one thread) 10.7 s system against 13.8 s user time, 557 ms per step. With the thresholds raised
(blocks come from the heap, freed memory is kept for reuse): 1.0 s system, 440 ms per step, and
evaluation 8.2 s instead of 16.0 s. Peak memory is unchanged there (the same blocks are reused), but not
for every pattern: torch's 64-byte-aligned blocks, allocated and freed in pairs, can leave freed space
unused, and 0.3-GB pairs reach 4.1 GB resident for 0.6 GB live (studies/malloc_big_blocks: there, too,
why blocks above 1 GiB still get their own mapping, though MIDX Table 7's Full step would take 1.7x less CPU
without it).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import torch

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc malloc.h
MMAP_THRESHOLD = 1 << 30   # blocks above this still get their own mapping
TRIM_THRESHOLD = 2**31 - 1
TOP_PAD = 1 << 28


def tune_malloc() -> bool:
    """Keep freed blocks for reuse instead of returning them to the kernel; False where the C
    library is not glibc (nothing changes then)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) and mallopt(M_TOP_PAD, TOP_PAD)
    return bool(ok and (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or mallopt(M_MMAP_THRESHOLD, 32 << 20)))


def skip_dynamo_import() -> int:
    """torch.optim.Optimizer's zero_grad, state_dict, load_state_dict and add_param_group are wrapped by
    torch._compile._disable_dynamo, whose first call imports torch._dynamo (1.5 s of CPU, measured; a
    quarter of a quick train job's fixed cost, over a hundred jobs) only to keep them out of
    compilation. A job of xcbench compiles nothing, so each is given itself as the cached 'disabled'
    version the wrapper looks up. torch's own Adam/SGD steps import it too (their step's wrapper does so
    unconditionally): train_step calls them through `optimizer_step`, which does not. Returns how many functions were marked (0
    where torch's internals differ: nothing changes then)."""
    import torch._compile

    probe = torch._compile._disable_dynamo(lambda: None).__code__
    n = 0
    for f in vars(torch.optim.Optimizer).values():
        fn = getattr(f, "__wrapped__", None)
        if fn is not None and getattr(f, "__code__", None) is probe and not hasattr(fn, "__dynamo_disable"):
            setattr(fn, "__dynamo_disable", fn)
            n += 1
    return n


def _undecorated_step(opt: torch.optim.Optimizer):
    """The body of `opt`'s step under torch's `_use_grad` decorator, or None where that layer is absent."""
    f = type(opt).step
    while f is not None:
        inner = getattr(f, "__wrapped__", None)
        if inner is not None and getattr(f, "__code__", None) is not None and f.__code__.co_name == "_use_grad":
            return inner
        f = inner
    return None


def optimizer_step(opt: torch.optim.Optimizer) -> None:
    """`opt.step()` without importing torch._dynamo: torch's Adam/SGD step is wrapped by `_use_grad`,
    which imports torch._dynamo on its first call (2.4 s of a tiny Adam job's 2.5-s first epoch on the
    2-core CPU, beside one other run) only to mark a graph break, then runs the body with grad mode set to the optimizer's
    `differentiable` flag. With no step hooks and `differentiable` off, the body is run here under
    no_grad, which is what the wrapper does; anything else goes through `opt.step()` as before."""
    from torch.optim import optimizer as O

    body = _undecorated_step(opt)
    hooks = (opt._optimizer_step_pre_hooks or opt._optimizer_step_post_hooks
             or O._global_optimizer_pre_hooks or O._global_optimizer_post_hooks)
    try:
        if body is None or hooks or opt.defaults.get("differentiable", False):
            opt.step()
            return
        with torch.no_grad():
            body(opt)
    except RuntimeError as e:
        if "sparse gradients" not in str(e):
            raise
        from xcbench.config import ConfigError
        raise ConfigError(f"train.optimizer: {type(opt).__name__} cannot update the sparse row gradients this head makes "
                          "(it reads class rows with F.embedding(sparse=True)); use optimizer: lazy_adam (Adam on the "
                          "rows a step touches), row_sgd or sgd") from e
    opt._optimizer_step_code()  # the profiler's marker, as the step wrapper calls it


def configure_process(threads: int | None) -> None:
    """torch's intra-op threads (`threads`: the Snakemake rule's `threads:`; None leaves torch's default),
    the allocator, and no torch._dynamo import for optimizer bookkeeping."""
    if threads:
        torch.set_num_threads(int(threads))
    tune_malloc()
    skip_dynamo_import()


_RSS_MARK: list[int] = []  # the resident set (bytes) when mark_rss last ran in this process


def _status_bytes(field: str) -> int | None:
    """A `kB` line of /proc/self/status (VmRSS, VmHWM) in bytes; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def mark_rss() -> bool:
    """Start a job's own memory count: reset the kernel's peak resident set (VmHWM) to the current one
    (`5` to /proc/self/clear_refs, Linux 4.0+) and keep that resident set. `rss_above_mark` is then the
    peak the job reached above where it started, without the import's. It still reads 16-118 MB higher in
    a fork of the warm server (forkserver.py) than in a fresh process (studies/fork_memory). False where
    unavailable."""
    rss = _status_bytes("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    if rss is None:
        return False
    _RSS_MARK[:] = [rss]
    return True


def rss_above_mark() -> int | None:
    """Peak resident bytes since `mark_rss` above the resident set it found; None without a mark."""
    hwm = _status_bytes("VmHWM")
    return None if not _RSS_MARK or hwm is None else max(0, hwm - _RSS_MARK[0])
