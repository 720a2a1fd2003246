"""The baseline selectors of Zhang et al. 2018 (section "Method Comparison").

- `random`: the labels of the batch plus k - |labels| other classes drawn uniformly without replacement.
- `optimal`: per example the q classes of highest response w_c . h (exact top-q of W h, over all C:
  the O(C d) upper bound the paper approximates).
- `pca_hash`: binary codes b_c = [P^T (w_c - mean) > 0] from the top `bits` principal directions P of
  the rows of W; an example of class c selects every class sharing c's code.
- `kmeans`: Lloyd's k-means of the rows of W into `clusters` groups (1024 in the paper); an example of
  class c selects c's cluster.
PCA and k-means select by the label's group only (they ignore h: the paper's point about them).
"""

from __future__ import annotations

import torch

from xcbench.kmeans import kmeans
from xcbench.registry import SELECTORS
from xcbench.selectors.base import IndexedSelector, Selector, groups_of, members


def first_distinct(draws: torch.Tensor) -> torch.Tensor:
    """The distinct values of `draws` in the order of their first occurrence."""
    u, inv = torch.unique(draws, return_inverse=True)
    pos = torch.arange(len(draws), device=draws.device)
    first = torch.full((len(u),), len(draws), device=draws.device).scatter_reduce_(0, inv, pos, "amin")
    return u[torch.argsort(first)]


@SELECTORS.register("random")
class Random(Selector):
    def select(self, h, y, k, gen):
        lab = torch.unique(y)
        need, n = k - len(lab), self.n_classes
        if need <= 0:
            return lab
        if need >= n - len(lab):
            return torch.arange(n, device=y.device)
        size = 2 * need + 16
        while True:  # oversample, drop labels and repeats; the first `need` distinct draws are a uniform subset
            draws = torch.randint(n, (size,), generator=gen, device=gen.device).to(y.device)
            others = first_distinct(draws[~torch.isin(draws, lab)])
            if len(others) >= need:
                return torch.unique(torch.cat([lab, others[:need]]))
            size *= 2


@SELECTORS.register("optimal")
class Optimal(Selector):
    def candidates(self, h, y, q, gen):
        return (h @ self.W.T).topk(min(q, self.n_classes), dim=1).indices                   # (B, q)


class GroupSelector(IndexedSelector):
    """A class's group (hash code, cluster) is selected for each example of that class."""

    def __init__(self, n_classes: int, rebuild_every: int | None = 100) -> None:
        super().__init__(n_classes, rebuild_every)
        self.keys = self.order = self.sorted_keys = None

    def group_keys(self, E: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def build(self, E, gen):
        self.keys = self.group_keys(E, gen)                                                    # (C,)
        self.order, self.sorted_keys = groups_of(self.keys)

    def candidates(self, h, y, q, gen):
        return members(self.order, self.sorted_keys, self.keys[y])


@SELECTORS.register("pca_hash")
class PCAHash(GroupSelector):
    def __init__(self, n_classes: int, bits: int = 10, rebuild_every: int | None = 100) -> None:
        super().__init__(n_classes, rebuild_every)
        self.bits = bits

    def group_keys(self, E, gen):
        Ec = (E - E.mean(0)).double()                                                          # (C, d)
        _, V = torch.linalg.eigh(Ec.T @ Ec)                                                    # ascending
        P = V[:, -min(self.bits, E.shape[1]):]                                                 # (d, b)
        bits = (Ec @ P > 0).long()                                                             # (C, b)
        return (bits << torch.arange(bits.shape[1], device=E.device)).sum(1)


@SELECTORS.register("kmeans")
class KMeans(GroupSelector):
    def __init__(self, n_classes: int, clusters: int = 1024, iters: int = 10, rebuild_every: int | None = 100) -> None:
        super().__init__(n_classes, rebuild_every)
        self.clusters, self.iters = min(clusters, n_classes), iters

    def group_keys(self, E, gen):
        C0 = E[torch.randperm(len(E), generator=gen, device=gen.device)[: self.clusters].to(E.device)]
        return kmeans(E, C0.clone(), self.iters)[1]
