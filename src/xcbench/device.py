"""Device choice: `auto` picks CUDA when present and falls back to the CPU; deterministic kernels on CUDA."""

from __future__ import annotations

import os

import torch

CHOICES = ("auto", "cpu", "cuda")


def pick_device(pref: str = "auto") -> torch.device:
    if pref not in CHOICES:
        raise ValueError(f"device must be one of {CHOICES}, got {pref!r}")
    if pref == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was requested but torch.cuda.is_available() is False; "
                           "use device: auto or cpu")
    if pref == "auto":
        pref = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(pref)


def device_name(device: torch.device) -> str:
    """Human-readable name of the device: the GPU model, or the CPU model from /proc/cpuinfo."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f" ({torch.get_num_threads()} threads)"
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def deterministic_kernels(device: torch.device) -> None:
    """On CUDA, torch's deterministic kernels (its reproducibility notes). Otherwise index_add_,
    index_put_(accumulate=True) and scatter_add_ add floats with atomics in whatever order the threads
    arrive, and two runs of one seed part in the last bits: seen on an H100, where a MIDX-rq run gave a
    different training loss (1e-8 relative) each time (its k-means sums n rows into K centroids by
    index_add_, the likely source: the RFF run, without k-means, repeated exactly); with this on, the
    CUDA run cut after an epoch resumes to the uninterrupted run's numbers bit for bit (tests/test_cuda.py).
    warn_only: an op with no deterministic kernel warns instead of stopping a run. cuBLAS needs a fixed
    workspace for it, set here unless the user set one (it applies to cuBLAS handles made after this;
    `xcbench train` calls this before its first CUDA product). Nothing changes on the CPU, whose kernels
    are deterministic already (and whose kept runs stay bit for bit as they were)."""
    if torch.device(device).type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
