"""Random-feature kernel proposals drawn through the kernel tree (samplers/kernel_tree.py), on L2-normalised h, c:

  rff (Rawat et al. 2019): phi(u) = D^-1/2 [cos(w_k . u), sin(w_k . u)]_k, w_k ~ N(0, nu I), so that
                           E[phi(x).phi(y)] = exp(-nu ||x - y||^2 / 2); the same fixed w_k serve queries and
                           classes and are redrawn only by `reseed`;
  random_maclaurin (Kar & Karnick 2012): unbiased features of exp(tau x.y) (the RF-softmax paper's Table 1).
Their estimates can be negative; the tree clamps a node's mass at eps (kernel_tree.py).
"""

from __future__ import annotations

import math

import torch

from xcbench.registry import SAMPLERS
from xcbench.samplers.kernel_tree import KernelTree


@SAMPLERS.register("rff")
class RFF(KernelTree):
    """Random Fourier features of the Gaussian kernel exp(-nu ||x - y||^2 / 2) (RF-softmax, Rawat et al. 2019).

    phi(u) = D^-1/2 [cos(w_k . u), sin(w_k . u)]_k with w_k ~ N(0, nu I), fixed until `reseed`."""

    def __init__(self, n_classes: int, D: int = 1024, nu: float = 4.0, seed: int = 0, dense_nodes: int | None = None) -> None:
        super().__init__(n_classes, dense_nodes)
        self.D, self.nu, self.seed = D, nu, seed
        self.w: torch.Tensor | None = None

    def reseed(self, seed: int) -> None:
        """Redraw the random features (the only way they change); rebuild with `update` after."""
        self.seed, self.w = seed, None

    def phi(self, z):
        if self.w is None or self.w.shape[1] != z.shape[-1]:
            g = torch.Generator().manual_seed(self.seed)
            w = torch.randn(self.D, z.shape[-1], generator=g, dtype=torch.float64) * math.sqrt(self.nu)  # (D, d)
            self.w = w.to(device=z.device, dtype=z.dtype)
        if self.w.dtype != z.dtype or self.w.device != z.device:
            self.w = self.w.to(device=z.device, dtype=z.dtype)
        p = z @ self.w.T                                                                   # (..., D)
        return torch.cat([p.cos(), p.sin()], -1).div_(math.sqrt(self.D))                   # (..., 2D)


@SAMPLERS.register("random_maclaurin")
class RandomMaclaurin(KernelTree):
    """Random Maclaurin features (Kar & Karnick 2012) of K(x, y) = exp(tau x.y) = sum_n a_n (x.y)^n,
    a_n = tau^n / n!. Feature k draws a degree N_k with P(N = n) = 2^-(n+1) and Rademacher vectors
    w_k1..w_kN; z_k(x) = sqrt(a_N 2^(N+1)) prod_j w_kj . x, phi = D^-1/2 z, so E[phi(x).phi(y)] = K(x, y).
    Unbiased but heavy-tailed (the RF-softmax paper's Table 1); negative estimates are clamped in the
    tree like RFF's. Degrees are capped at `max_degree` (P(N > 30) = 2^-31)."""

    def __init__(self, n_classes: int, D: int = 1024, tau: float = 1.0, seed: int = 0, max_degree: int = 30,
                 dense_nodes: int | None = None) -> None:
        super().__init__(n_classes, dense_nodes)
        self.D, self.tau, self.seed, self.max_degree = D, tau, seed, max_degree

    def phi(self, z):
        g = torch.Generator().manual_seed(self.seed)
        u = torch.rand(self.D, generator=g, dtype=torch.float64)
        N = torch.floor(-torch.log2(u)).clamp(max=self.max_degree).long()                 # P(N = n) = 2^-(n+1)
        a = torch.exp(N * math.log(self.tau) - torch.lgamma(N + 1.0)) if self.tau > 0 else (N == 0).double()
        out = torch.sqrt(a * 2.0 ** (N + 1)).to(z.dtype).to(z.device).expand(*z.shape[:-1], self.D).clone()
        for j in range(1, int(N.max()) + 1):
            w = (torch.randint(0, 2, (self.D, z.shape[-1]), generator=g) * 2 - 1).to(z.dtype).to(z.device)
            act = (N >= j).nonzero().squeeze(1).to(z.device)                               # features of degree >= j
            out[..., act] *= z @ w[act].T                                                  # (..., |act|)
        return out / math.sqrt(self.D)
