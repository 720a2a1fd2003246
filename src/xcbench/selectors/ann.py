"""Library-backed selectors: what a practitioner would reach for instead of the paper's hashing forest.

`faiss_ivf`: an inverted-file index over the class rows with inner-product search (faiss.IndexIVFFlat,
METRIC_INNER_PRODUCT): k-means cells of the rows (nlist), the `nprobe` cells nearest to h searched
exhaustively; per example the q classes of highest response w_c . h among them (the approximate
counterpart of `optimal`). Rebuilt from a snapshot of W every `rebuild_every` steps like HF. Needs the
`ann` extra (`pip install -e ".[ann]"`, faiss-cpu); without it the selector is listed but raises with
that instruction when built, and its tests are skipped.

`annoy`: Spotify's Annoy forest of random-projection trees, the library that the public HF code
(yl-1993/hfsoftmax, models/ext_layers/hf_sampler.py) uses in place of the paper's hashing forest: 50
trees over the class rows with Annoy's default angular metric, rebuilt every 100 iterations, and per
example the q classes nearest to h (the public code asks for M / B + 1; Annoy's search visits
search_k = trees x q nodes by default).
`metric: dot` ranks by the response w_c . h instead. Built with one thread and a seed drawn from the
run's generator, so a run is reproducible. Needs the `annoy` extra (`pip install -e ".[annoy]"`, compiled
from source at install; 20 s here); without it, as faiss_ivf.
"""

from __future__ import annotations

import numpy as np
import torch

from xcbench.registry import SELECTORS
from xcbench.selectors.base import IndexedSelector

POINTS_PER_CELL = 39  # faiss warns below this many training points per k-means cell


@SELECTORS.register("faiss_ivf")
class FaissIVF(IndexedSelector):
    """faiss IVFFlat over the class rows, inner product: per example the q best of the nprobe nearest cells
    (0.999 of exact top-k at 1/52 of its time with nprobe 4 on the clustered mixture at 10^6 classes; 0.58 at
    1/8 and 0.87 at 0.63 of it with nprobe 32 and 128 on trained 87K-class face embeddings,
    benchmarks/out/selectors{,_trained}.md)."""
    requires, extra = "faiss", "ann"  # faiss-cpu

    def __init__(self, n_classes: int, nlist: int = 1024, nprobe: int = 8, rebuild_every: int | None = 100) -> None:
        super().__init__(n_classes, rebuild_every)
        self.nlist, self.nprobe = nlist, nprobe
        self.index = None

    def build(self, E, gen):
        faiss = self.library()
        X = np.ascontiguousarray(E.detach().float().cpu().numpy())                          # (C, d)
        nlist = max(1, min(self.nlist, len(X) // POINTS_PER_CELL))
        quantizer = faiss.IndexFlatIP(X.shape[1])
        index = faiss.IndexIVFFlat(quantizer, X.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen, device=gen.device).item())
        index.train(X)
        index.add(X)
        self.index, self._quantizer = index, quantizer  # the quantizer must outlive the index

    def candidates(self, h, y, q, gen):
        self.index.nprobe = min(self.nprobe, self.index.nlist)  # read at every search: nprobe may change
        _, I = self.index.search(np.ascontiguousarray(h.detach().float().cpu().numpy()), q)  # (B, q)
        ids = torch.from_numpy(I).to(h.device)
        return torch.where(ids >= 0, ids, y.unsqueeze(1).expand_as(ids))  # fewer than q found: pad with the label


@SELECTORS.register("annoy")
class Annoy(IndexedSelector):
    """Annoy's random-projection forest over the class rows, the public HF code's index: per example the q
    nearest classes by its angular metric (or `dot`, the response), searching search_k nodes (10 trees, dot:
    0.79 of exact top-k at 1/4 of its time with 16x the default search_k on the mixture at 10^6 classes;
    angular at most 0.70, benchmarks/out/selectors.md)."""
    requires, extra = "annoy", "annoy"
    METRICS = ("angular", "dot")

    def __init__(self, n_classes: int, trees: int = 50, metric: str = "angular", search_k: int = -1,
                 rebuild_every: int | None = 100) -> None:
        super().__init__(n_classes, rebuild_every)
        if metric not in self.METRICS:
            raise ValueError(f"annoy: metric must be one of {self.METRICS}, got {metric!r}")
        self.trees, self.metric, self.search_k = trees, metric, search_k
        self.index = None

    def build(self, E, gen):
        annoy = self.library()
        X = E.detach().float().cpu().numpy()                                                   # (C, d)
        index = annoy.AnnoyIndex(X.shape[1], self.metric)
        index.set_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen, device=gen.device).item()))
        for i, row in enumerate(X):
            index.add_item(i, row)
        index.build(self.trees, n_jobs=1)  # one thread: the same trees from the same seed
        self.index = index

    def candidates(self, h, y, q, gen):
        X = h.detach().float().cpu().numpy()                                                   # (B, d)
        ids = torch.tensor([row + [-1] * (q - len(row)) for row in
                            (self.index.get_nns_by_vector(x, q, search_k=self.search_k) for x in X)]).to(h.device)
        return torch.where(ids >= 0, ids, y.unsqueeze(1).expand_as(ids))  # fewer than q found: pad with the label
