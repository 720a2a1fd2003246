"""Explicit random generators.

Every random draw in xcbench takes a `torch.Generator` (or a numpy `Generator`) derived from the
run seed and a purpose string, so adding a new consumer of randomness never shifts the streams
of the others. Ops that cannot take a generator (dropout) use torch's global stream, which
`seed_global` seeds and checkpoints save/restore.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, purpose: str) -> int:
    digest = hashlib.sha256(f"{seed}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def torch_generator(seed: int, purpose: str, device: str | torch.device = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, purpose))
    return g


def numpy_generator(seed: int, purpose: str) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, purpose))


def seed_global(seed: int) -> None:
    torch.manual_seed(derive_seed(seed, "global"))
