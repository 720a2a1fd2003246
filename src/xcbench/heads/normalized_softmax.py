"""Cosine (normalised) softmax over all n classes (Rawat et al. 2019, RF-softmax's FULL; MIDX's Full with
`normalize: false`), and the logits every sampled softmax shares (heads/sampled_softmax.py).

Logits o_c = tau h . e_c with h and e_c L2-normalised when `normalize` (the RF-softmax setting:
"1/sqrt(tau)" is the paper's softmax temperature, 0.3 there, so tau = 11.1). With `absolute`
(Blanc & Rendle's absolute softmax, used with the quadratic kernel) the logits are tau |h . e_c|;
`scores` then returns those logits too, so evaluation measures the distribution that was trained.
Loss: cross-entropy over all n classes, -log softmax(o)_t. With `chunk` the same loss and gradients come from
heads/full_chunked.py's class-chunked pass over (tau h^, e^) with no bias: `chunk` x B logits at a time instead of
n x B (MIDX Table 7's Full at Gowalla: 67K queries a batch x 122K items would be 33 GB of float32 logits, and as much
again for their gradient).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xcbench.heads.base import Head, check_param, class_weights
from xcbench.heads.full_chunked import ChunkedSoftmaxCE
from xcbench.heads.full_softmax import softmax_ce
from xcbench.registry import HEADS


@HEADS.register("normalized_softmax")
class NormalizedSoftmax(Head):

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, tau: float = 1.0,
                 normalize: bool = True, absolute: bool = False, init_std: float = 0.01,
                 chunk: int | None = None) -> None:
        super().__init__(in_dim, n_classes, gen)
        self.E = class_weights(n_classes, in_dim, gen, init_std)                                 # (n, d)
        self.tau, self.normalize, self.absolute = tau, normalize, absolute
        if chunk is not None:
            check_param("normalized_softmax", "chunk", chunk, 1)
            if absolute:
                raise ValueError("normalized_softmax: params.chunk computes tau h.e logits; with absolute: true "
                                 "(tau |h.e|) leave chunk out")
        self.chunk = chunk

    def _unit(self, z: torch.Tensor) -> torch.Tensor:
        return F.normalize(z, dim=-1) if self.normalize else z

    def _logit(self, dot: torch.Tensor) -> torch.Tensor:
        z = dot.abs() if self.absolute else dot
        # tau z with tau = 1 is z bit for bit: skipping the product spares a full (B, n) tensor and its backward
        # (MIDX Table 7's Full on Sports: about 15% of a 16 s CPU step, 21,073 x 18,357 logits)
        return z if self.tau == 1.0 else self.tau * z

    def class_embeddings(self) -> nn.Parameter:
        return self.E

    def rows(self, ids: torch.Tensor, sparse: bool = False) -> torch.Tensor:
        """Class embeddings of `ids` (any shape), normalised when `normalize`: (..., d)."""
        return self._unit(F.embedding(ids, self.E, sparse=sparse))

    def scores(self, h):
        return self._logit(self._unit(h) @ self._unit(self.E).T)                             # (B, n)

    def loss(self, h, y, idx, gen):
        if self.chunk is None:
            return softmax_ce(self.scores(h), y)
        q = self._unit(h) if self.tau == 1.0 else self.tau * self._unit(h)                    # (B, d)
        zero = torch.zeros(self.n_classes, dtype=q.dtype, device=q.device)                   # (n,) no bias
        return ChunkedSoftmaxCE.apply(q, self._unit(self.E), zero, y, self.chunk)
