"""Flat-array helpers of the hashing forest (selectors/forest.py): gathered row dot products and the
elements of contiguous segments."""

from __future__ import annotations

import torch

CHUNK = 1024  # rows per gathered block: its (CHUNK, d) temporaries stay in cache (65,536 rows: 6x slower)


def rowdot(A: torch.Tensor, ia: torch.Tensor, B: torch.Tensor, ib: torch.Tensor) -> torch.Tensor:
    """sum_j A[ia, j] B[ib, j] in blocks.  (len(ia),)  index_select: on the CPU 6x faster than A[ia] for rows"""
    return torch.cat([(A.index_select(0, ia[s:s + CHUNK]) * B.index_select(0, ib[s:s + CHUNK])).sum(1)
                      for s in range(0, len(ia), CHUNK)]) \
        if len(ia) else torch.zeros(0, device=A.device, dtype=A.dtype)


def ranges(start: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For segments (start, n): (segment id of each element, its position start + offset)."""
    seg = torch.repeat_interleave(torch.arange(len(n), device=n.device), n)
    offs = torch.arange(int(n.sum()), device=n.device) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
    return seg, start[seg] + offs
