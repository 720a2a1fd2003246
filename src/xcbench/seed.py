"""Explicit random generators, and draws that do not depend on the device.

Every random draw in xcbench takes a `torch.Generator` (or a numpy `Generator`) derived from the
run seed and a purpose string, so adding a new consumer of randomness never shifts the streams
of the others. Every generator lives on the CPU: a draw is made there and moved to the device that
uses it (`rand`, `randint`, `multinomial`, features/base.Dropout), so a run on a GPU draws the
numbers that the same run draws on the CPU, and its results agree within float tolerance (the
Standards; benchmarks/device_parity.py measures it). The price on a GPU is one host-to-device copy
per draw, and for `multinomial` a device-to-host copy of the probabilities: (B, K^2) for MIDX,
(B, n) for the exact samplers (Sphere). The cheaper alternative, an inverse CDF on the device from
uniforms drawn on the CPU, consumes the same stream but not the same classes: torch's CPU kernel sums
the cumulative distribution in float32 one class after another, a device scan rounds otherwise, and 49
of 111,510 draws (n up to 5,000) fell into a neighbouring class (measured on the CPU with float64 sums).
`train.draws: device` is the other choice, for GPU runs bound by launches and synchronisation: the
training loop's loss generator (negatives, selectors' random fill, multi-label picks) is then made on
the model's device, every draw stays there and nothing waits for the host; the classes drawn differ
from the CPU's (another generator) and follow the same distributions (tests/test_cuda.py, a
chi-square test per sampler on a GPU). On the CPU both choices are the same generator.
Ops that cannot take a generator (dropout) use torch's global CPU stream, which `seed_global` seeds
and checkpoints save/restore; the dropout inside nn.LSTM and
nn.TransformerEncoderLayer is drawn on the device (cuDNN's and the fused kernels' own streams), so
models with those agree across devices in distribution only.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, purpose: str) -> int:
    digest = hashlib.sha256(f"{seed}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def torch_generator(seed: int, purpose: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator for (seed, purpose), on the CPU unless `device` names another (`train.draws:
    device`): draw with it through `rand`/`randint`/`multinomial`."""
    return torch.Generator(device=device).manual_seed(derive_seed(seed, purpose))


DRAWS = ("cpu", "device")


def draws_device(draws: str, device: torch.device) -> torch.device:
    """Where the loss generator of a run on `device` lives for `train.draws` (module docstring)."""
    if draws not in DRAWS:
        raise ValueError(f"train.draws must be one of {DRAWS}, got {draws!r}")
    return torch.device("cpu") if draws == "cpu" else device


def numpy_generator(seed: int, purpose: str) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, purpose))


def seed_global(seed: int) -> None:
    torch.manual_seed(derive_seed(seed, "global"))


def rand(shape, gen: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """U[0, 1) of `shape` drawn on the generator's device and moved to `device`."""
    return torch.rand(shape, generator=gen, device=gen.device).to(device)


def randint(high: int, shape, gen: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """Integers in [0, high) of `shape` drawn on the generator's device and moved to `device`."""
    return torch.randint(0, high, shape, generator=gen, device=gen.device).to(device)


def multinomial(p: torch.Tensor, m: int, gen: torch.Generator, replacement: bool = True) -> torch.Tensor:
    """torch.multinomial of the rows of p (unnormalised weights) on the generator's device; the
    indices come back on p's device.  p.shape[:-1] + (m,)"""
    return torch.multinomial(p.to(gen.device), m, replacement=replacement, generator=gen).to(p.device)
