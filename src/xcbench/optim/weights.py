"""Weight optimizers (torch's implementations, registered by name; Adam in its multi-tensor form) and
gradient-norm clipping; the lr schedules they follow are xcbench.schedules (torch-free, so captions read
their defaults without torch), registered when this package is imported.
"""

from __future__ import annotations

import torch

import xcbench.schedules  # noqa: F401  (registers the lr schedules with the optimizers)
from xcbench.registry import OPTIMIZERS


@OPTIMIZERS.register("adam")
class Adam(torch.optim.Adam):
    """torch's Adam (Kingma & Ba 2015) in its multi-tensor form (`foreach`) on every device unless
    `foreach: false` or `fused: true` is given. On the CPU torch otherwise picks its per-tensor loop; the two
    apply the same float32 operations to every element, bit for bit (tests/test_optim.py), and the
    multi-tensor update of a (10^5, 256) class table takes 0.6x the loop's time on one CPU thread
    (benchmarks/optimizers.py): the O(n d) update that every step of a sampled head under dense Adam pays.
    `fused: true` is faster still but rounds differently (not the default: kept runs would change)."""

    def __init__(self, params, lr: float = 1e-3, *, foreach: bool | None = True, **kwargs) -> None:
        super().__init__(params, lr=lr, foreach=bool(foreach) and not kwargs.get("fused"), **kwargs)


OPTIMIZERS.register("sgd")(torch.optim.SGD)
OPTIMIZERS.register("adagrad")(torch.optim.Adagrad)


@torch.no_grad()
def clip_grad_norm(params, max_norm: float) -> torch.Tensor:
    """Scale all gradients so that their global L2 norm is at most `max_norm` (sparse row gradients
    are coalesced first, so repeated rows count once); returns the norm before clipping, a float64
    0-dim tensor on the gradients' device: nothing here waits for a GPU (the factor is applied as a
    tensor, 1 when the norm is within bounds; on the CPU the same float32 products as a Python factor)."""
    grads = []
    for p in params:
        if p.grad is not None:
            if p.grad.is_sparse:
                p.grad = p.grad.coalesce()
                grads.append(p.grad.values())
            else:
                grads.append(p.grad)
    if not grads:
        return torch.zeros((), dtype=torch.float64)
    total = torch.zeros((), dtype=torch.float64, device=grads[0].device)
    for g in grads:  # the float64 copy squared in place: the squares in a second fresh buffer (g.double().square())
        sq = g.to(torch.float64, copy=True)  # made the clip 1.3x longer on one CPU thread, a PTB LSTM step 1.03-1.06x
        total = total + sq.mul_(sq).sum()    # (benchmarks/step_forms.py); the same tensor, so the same sums to the bit
    norm = torch.sqrt(total)                                                                 # ()
    factor = torch.where(norm > max_norm, max_norm / (norm + 1e-6), torch.ones_like(norm))
    for g in grads:
        g.mul_(factor.to(g.dtype))
    return norm
