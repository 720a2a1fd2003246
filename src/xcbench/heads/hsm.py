"""Hierarchical softmax (Goodman 2001; Morin & Bengio 2005), the HSM baseline of Zhang et al. 2018.

A balanced binary tree over the classes (face identities have no frequency prior, so the tree halves
the class range [lo, hi) at mid = (lo + hi) // 2 recursively: C - 1 internal nodes, depth
ceil(log2 C)). Internal node v has a vector u_v and bias a_v; the path of class c is the nodes
v_1..v_D from the root with directions s_j = +1 (left) or -1 (right), and
    p(c | h) = prod_j sigma(s_j (u_{v_j} . h + a_{v_j})),     loss = -log p(y | h),
a proper distribution over the C classes (the probabilities sum to 1). A step reads only the D node
rows of each example's path (sparse rows). `scores` returns log p(c | h) for every class: the
per-node log sigma(+-z) summed along every path by one sparse (C, 2 (C - 1)) product.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from xcbench.heads.base import Head, layer_mb
from xcbench.registry import HEADS


def balanced_paths(C: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(nodes (C, D), signs (C, D)) of the range-halving tree; padded with node 0 and sign 0."""
    D = max(1, math.ceil(math.log2(max(C, 2))))
    nodes, signs = torch.zeros(C, D, dtype=torch.long), torch.zeros(C, D)
    lo, hi, depth = torch.tensor([0]), torch.tensor([C]), 0
    next_id = 0
    while True:
        split = hi - lo > 1
        lo, hi = lo[split], hi[split]
        if not len(lo):
            break
        ids = torch.arange(next_id, next_id + len(lo))
        next_id += len(lo)
        mid = (lo + hi) // 2
        n = hi - lo
        cls = torch.repeat_interleave(lo, n) + torch.arange(int(n.sum())) - torch.repeat_interleave(torch.cumsum(n, 0) - n, n)
        node = torch.repeat_interleave(ids, n)
        nodes[cls, depth] = node
        signs[cls, depth] = torch.where(cls < torch.repeat_interleave(mid, n), 1.0, -1.0)
        lo, hi, depth = torch.stack([lo, mid], 1).reshape(-1), torch.stack([mid, hi], 1).reshape(-1), depth + 1  # breadth-first
    return nodes, signs


@HEADS.register("hsm")
class HierarchicalSoftmax(Head):
    multi_label = False

    def __init__(self, in_dim: int, n_classes: int, gen: torch.Generator, init_std: float | None = None) -> None:
        super().__init__(in_dim, n_classes, gen)
        std = init_std if init_std is not None else 1.0 / math.sqrt(in_dim)
        n_nodes = max(1, n_classes - 1)
        self.U = nn.Parameter(torch.randn(n_nodes, in_dim, generator=gen) * std)               # (C - 1, d)
        self.a = nn.Parameter(torch.zeros(n_nodes, 1))                                          # (C - 1, 1)
        nodes, signs = balanced_paths(n_classes)
        self.register_buffer("nodes", nodes)
        self.register_buffer("signs", signs)

    def loss(self, h, y, idx, gen):
        v, s = self.nodes[y], self.signs[y]                                                     # (B, D)
        z = (h.unsqueeze(1) * F.embedding(v, self.U, sparse=True)).sum(-1) + F.embedding(v, self.a, sparse=True)[..., 0]
        return -(F.logsigmoid(s * z) * (s != 0)).sum(1).mean()

    def _paths(self) -> torch.Tensor:
        """Sparse (C, 2 (C - 1)) 0/1 matrix: class c's row picks log sigma(+z_v) (column v) or
        log sigma(-z_v) (column C - 1 + v) along its path, so log p = [log sigma(z), log sigma(-z)] P^T."""
        key = (self.nodes.device, self.nodes.data_ptr())
        if getattr(self, "_P_key", None) != key:
            n_nodes = self.U.shape[0]
            on = self.signs != 0                                                                # (C, D)
            rows = torch.arange(self.n_classes, device=self.nodes.device).unsqueeze(1).expand_as(self.nodes)[on]
            cols = (self.nodes + n_nodes * (self.signs < 0))[on]
            P = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(len(rows), device=rows.device),
                                        (self.n_classes, 2 * n_nodes), check_invariants=False).coalesce()
            with warnings.catch_warnings():  # "sparse CSR support is in beta": the product below is all we use
                warnings.simplefilter("ignore", UserWarning)
                self._P = P.to_sparse_csr()
            self._P_key = key
        return self._P

    def scores(self, h):
        z = h @ self.U.T + self.a[:, 0]                                                         # (B, C - 1)
        L = torch.cat([F.logsigmoid(z), F.logsigmoid(-z)], 1)                                   # (B, 2 (C - 1))
        return (self._paths() @ L.T).T                                                          # (B, C)

    def report(self):
        return {"softmax_layer_mb": layer_mb(self.nodes.shape[1], self.in_dim)}
