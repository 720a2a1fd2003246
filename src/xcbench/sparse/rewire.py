"""SET-style rewiring of sparse layers (Mocanu et al. 2018), as used by Schultheis & Babbar (2023).

Every `interval` steps the `fraction` of weights with the smallest magnitude (over the whole
layer) get a new, uniformly drawn source input; the fixed-fan-in layer keeps each moved weight in
its label's column, so every label keeps exactly s connections, and a new input is never one the
label already has. The weight values are kept (as in the paper's code); the optimizer moments of
the moved weights (Adam's exp_avg / exp_avg_sq, or any state of the weight's shape) are reset.
"""

from __future__ import annotations

import torch


def smallest(values: torch.Tensor, fraction: float) -> torch.Tensor:
    """Flat indices of the round(fraction * n) smallest |values|."""
    k = int(round(fraction * values.numel()))
    return values.detach().abs().flatten().topk(k, largest=False).indices


def regrow_fixed_fan_in(I: torch.Tensor, flat: torch.Tensor, n_in: int, gen: torch.Generator) -> None:
    """New distinct inputs for positions `flat` of I (s, m), in place, without duplicates per label."""
    s, m = I.shape
    k_pos, cols = flat // m, flat % m
    todo = torch.ones(flat.numel(), dtype=torch.bool)
    while todo.any():
        cand = torch.randint(0, n_in, (int(todo.sum()),), generator=gen, dtype=torch.int32)
        I[k_pos[todo], cols[todo]] = cand
        # a position is done when its input is unique within its label's column
        col_vals = I[:, cols]                                                     # (s, n)
        dup = (col_vals == I[k_pos, cols].unsqueeze(0)).sum(0) > 1                # (n,)
        todo = dup


def reset_moments(optimizer: torch.optim.Optimizer | None, p: torch.Tensor, flat: torch.Tensor) -> None:
    if optimizer is None or p not in optimizer.state:
        return
    for v in optimizer.state[p].values():
        if torch.is_tensor(v) and v.shape == p.shape:
            v.view(-1)[flat] = 0
