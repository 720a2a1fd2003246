"""Adam that accepts sparse row gradients next to dense ones ("lazy" Adam, as TF's LazyAdam).

For a dense gradient g the update is Adam's (Kingma & Ba 2015):
    m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2,
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
For a sparse row gradient (rows R, values G) only the rows in R are read and written: their moments
follow the same recursion and the same bias correction with the parameter's step count t; rows not
in R keep stale moments (the "lazy" approximation, which makes a sampled-softmax step cost
O(|R| d) instead of O(n d)). torch.optim.Adam rejects sparse gradients; torch.optim.SparseAdam
rejects dense ones; models mixing an LSTM (dense) with a sampled softmax (sparse) need both.
"""

from __future__ import annotations

import torch

from xcbench.registry import OPTIMIZERS


@OPTIMIZERS.register("lazy_adam")
class LazyAdam(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float64)
                    st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                st["step"] += 1
                t = st["step"].item()
                c1, c2 = 1 - b1 ** t, 1 - b2 ** t
                g = p.grad
                if g.is_sparse:
                    g = g.coalesce()
                    R, G = g.indices()[0], g.values()                                          # (r,), (r, d)
                    m = st["m"][R].mul_(b1).add_(G, alpha=1 - b1)
                    v = st["v"][R].mul_(b2).addcmul_(G, G, value=1 - b2)
                    st["m"][R], st["v"][R] = m, v
                    step = m / ((v / c2).sqrt_() + eps)                                          # (r, d)
                    p.add_(torch.sparse_coo_tensor(R.unsqueeze(0), step, p.shape, is_coalesced=True,
                                                    check_invariants=False), alpha=-lr / c1)
                else:
                    st["m"].mul_(b1).add_(g, alpha=1 - b1)
                    st["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                    p.addcdiv_(st["m"], (st["v"] / c2).sqrt_().add_(eps), value=-lr / c1)
        return closure() if closure is not None else None
