"""Device choice: `auto` picks CUDA when present and falls back to the CPU."""

from __future__ import annotations

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
