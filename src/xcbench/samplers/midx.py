"""MIDX: inverted multi-index proposals for sampled softmax (MIDX paper, sections 4-5, Theorems 1-2;
the equations below are restored where the paper's text loses them).

Two codebooks of K codewords quantize every class embedding c_i:
  product quantization (`midx_pq`):  c_i = [c_i1; c_i2],  u = k-means{c_i1},  v = k-means{c_i2}
  residual quantization (`midx_rq`): u = k-means{c_i},  v = k-means{c_i - u_{a_i}}
with assignments a_i, b_i and cells Omega_{k,l} = {i : a_i = k, b_i = l}. Cell scores (tau: the
head's logit scale, o_i = tau h.c_i):
  s_{k,l}(h) = tau (h_1.u_k + h_2.v_l)   (pq)        s_{k,l}(h) = tau (h.u_k + h.v_l)   (rq)
MIDX (Theorem 2) draws a cell, then a class uniformly inside it:
  q(i | h) = exp(s_{a_i b_i}) / sum_{k,l} |Omega_{k,l}| exp(s_{k,l})
Two ways to draw from it, the same distribution (`draw`; tests compare both with brute force):
  `cells` (default): a cell from softmax_{k,l}(s_{k,l} + log |Omega_{k,l}|) over the flattened K^2 cells
    (empty cells never drawn): B K^2 exponentials, softmax and cumulative sums a step;
  `stages` (the paper's codeword 1, then codeword 2): with e1 = exp(s1), e2 = exp(s2) (B, K) and the
    cell sizes N (K, K), P(k) ∝ e1_k (e2 N^T)_k, P(l | k) ∝ N_{k,l} e2_l; log q(i) = s1_{a_i} +
    s2_{b_i} - log sum_k e1_k (e2 N^T)_k: one (B, K) x (K, K) product and B m K weights, where `cells`
    touches B K^2 weights five times (at K = 128 > sqrt(n) on PTB that cost more than the full softmax's
    logits). Same distribution, other random numbers: a run's draws depend on the choice.
Either way the class is then drawn uniformly inside its cell (`midx_exact`, Theorem 1: samplers/midx_exact.py).
The index is rebuilt at every epoch start by k-means in torch (GPU when the embeddings are there),
warm-started from the previous epoch's codewords (first time: K distinct rows drawn with the
explicit generator) and stopped when no assignment changes (at most `max_iter` Lloyd steps). Above
256 K classes the Lloyd steps run on 256 K classes drawn with the generator (faiss's default
training-set size per centroid), then every class is assigned to its nearest codeword once:
k-means on all 10^6 points of a sphere still moved 2% of them after 14 steps (1.1 s each here).
Codewords are buffers (checkpointed), so a resumed run rebuilds the same index.
"""

from __future__ import annotations

import torch

from xcbench.kmeans import kmeans, nearest
from xcbench.registry import SAMPLERS
from xcbench.samplers.base import Sampler
from xcbench.seed import multinomial, rand

DRAWS = ("cells", "stages")  # `draw`: MIDX._sample_<draw> and MIDX._log_prob_<draw> implement it


class MIDX(Sampler):
    needs_index = True
    shaped = ("U", "V")  # buffers sized at the first index build (taken from a checkpoint's shapes)

    def __init__(self, n_classes: int, K: int = 32, tau: float = 1.0, max_iter: int = 100,
                 points_per_codeword: int = 256, draw: str = "cells") -> None:
        super().__init__(n_classes)
        if draw not in DRAWS:
            raise ValueError(f"MIDX sampler_params.draw = {draw!r}: write one of {sorted(DRAWS)} "
                             "(the same proposal; `stages` draws codeword 1, then codeword 2, cheaper when K^2 is large)")
        self.draw = draw
        self.K, self.tau, self.max_iter = min(K, n_classes), tau, max_iter
        self.fit_points = points_per_codeword * self.K  # Lloyd iterations on at most this many classes
        self.register_buffer("U", torch.zeros(0))   # (K, d1) first codebook
        self.register_buffer("V", torch.zeros(0))   # (K, d2) second codebook
        self.a = self.b = self.order = self.start = self.count = None
        self.c: torch.Tensor | None = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for k in self.shaped:  # codebooks take their shape from the checkpoint (the tensor keeps its identity)
            if prefix + k in state_dict:
                getattr(self, k).data = torch.empty_like(state_dict[prefix + k])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _fit_rows(self, n: int, gen, device) -> torch.Tensor | None:
        """The classes k-means iterates on: all of them, or `fit_points` drawn with `gen` (then every
        class is assigned to its nearest codeword once, after the iterations)."""
        if n <= self.fit_points:
            return None
        g = gen if gen is not None else torch.Generator().manual_seed(0)
        return torch.randperm(n, generator=g, device=g.device)[: self.fit_points].to(device)

    def _kmeans(self, X: torch.Tensor, C0: torch.Tensor, rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if rows is None:
            return kmeans(X, C0, self.max_iter)
        C, _ = kmeans(X[rows], C0, self.max_iter)
        return C, nearest(X, C)

    def _init(self, X: torch.Tensor, C: torch.Tensor, gen) -> torch.Tensor:
        if C.shape == (self.K, X.shape[1]):
            return C.to(X)                                                                    # warm start
        g = gen if gen is not None else torch.Generator().manual_seed(0)
        return X[torch.randperm(len(X), generator=g, device=g.device)[: self.K].to(X.device)].clone()

    def quantize(self, c: torch.Tensor, gen) -> None:
        """Set U, V, a, b from the class embeddings c (n, d): k-means every rebuild."""
        U, self.a, V, self.b = self.fit_codebooks(c, gen)
        self.U.data, self.V.data = U, V

    def split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The parts of h scored against U and V."""
        raise NotImplementedError

    def update(self, class_emb, gen):
        self.c = class_emb.detach()
        self.quantize(self.c, gen)
        self.build_cells()

    def build_cells(self) -> None:
        """The inverted index (classes sorted by cell, cell sizes and offsets) from a, b."""
        cell = self.a * self.K + self.b                                                        # (n,)
        self.order = torch.argsort(cell, stable=True)                                          # classes by cell
        self.count = torch.bincount(cell, minlength=self.K * self.K)                          # (K^2,)
        self.start = torch.cumsum(self.count, 0) - self.count

    def cell_scores(self, h: torch.Tensor) -> torch.Tensor:
        U, V = self.U.detach(), self.V.detach()
        h1, h2 = self.split(h.detach().to(U.dtype))
        return self.tau * ((h1 @ U.T).unsqueeze(2) + (h2 @ V.T).unsqueeze(1)).flatten(1)       # (B, K^2)

    def _cell_logits(self, h):
        return self.cell_scores(h) + self.count.to(self.U.dtype).log().unsqueeze(0)           # -inf: empty

    def _in_cells(self, cells: torch.Tensor, gen) -> torch.Tensor:
        """A class uniformly inside each drawn cell (B, m)."""
        u = rand(cells.shape, gen, cells.device)
        return self.order[self.start[cells] + (u * self.count[cells]).long().clamp(max=self.count[cells] - 1)]

    def _sample_cells(self, h, m, gen, targets=None):
        """m cells per query from softmax(L) over the K^2 cells, then a class in each: (ids, log q[, log q_t])."""
        L = self._cell_logits(h)                                                               # (B, K^2), once
        cells = multinomial(torch.softmax(L, 1), m, gen)                                     # (B, m)
        out = (self._in_cells(cells, gen), self._log_q(L, cells))
        return out if targets is None else out + (self._log_q(L, self.a[targets] * self.K + self.b[targets]),)

    def _log_q(self, L: torch.Tensor, cells: torch.Tensor) -> torch.Tensor:
        """log q(i) = s_cell - log Z = L_cell - log |cell| - logsumexp(L), from the cell logits L."""
        return (L.gather(1, cells) - self.count[cells].to(L.dtype).log() - torch.logsumexp(L, 1, keepdim=True)).float()

    def _stages(self, h):
        """(s1, s2, e2, P(k) unnormalised, log Z) of the staged draw (module docstring), each (B, K) but log Z (B, 1)."""
        U, V = self.U.detach(), self.V.detach()
        h1, h2 = self.split(h.detach().to(U.dtype))
        s1, s2 = self.tau * (h1 @ U.T), self.tau * (h2 @ V.T)                                  # (B, K) each
        m1, m2 = s1.amax(1, keepdim=True), s2.amax(1, keepdim=True)
        e2 = (s2 - m2).exp()
        p1 = (s1 - m1).exp() * (e2 @ self._sizes(e2.dtype).T)                                 # (B, K)
        return s1, s2, e2, p1, p1.sum(1, keepdim=True).log() + m1 + m2

    def _sizes(self, dtype) -> torch.Tensor:
        return self.count.view(self.K, self.K).to(dtype)                                      # (K, K) |Omega_{k,l}|

    def _sample_stages(self, h, m, gen, targets=None):
        """Codeword k from P(k), codeword l from P(l | k), a class in cell (k, l): (ids, log q[, log q_t])."""
        s1, s2, e2, p1, log_Z = self._stages(h)
        k = multinomial(p1, m, gen)                                                           # (B, m)
        cdf = (self._sizes(e2.dtype)[k] * e2.unsqueeze(1)).cumsum(2)                          # (B, m, K) of P(l | k)
        u = rand(k.shape + (1,), gen, cdf.device).to(cdf.dtype) * cdf[..., -1:]              # < cdf's last (u < 1)
        l = torch.searchsorted(cdf, u, right=True).squeeze(2)  # (B, m): first l with cdf_l > u, never an empty cell
        out = (self._in_cells(k * self.K + l, gen), self._staged_log_q(s1, s2, log_Z, k, l))
        return out if targets is None else out + (self._staged_log_q(s1, s2, log_Z, self.a[targets], self.b[targets]),)

    @staticmethod
    def _staged_log_q(s1, s2, log_Z, a, b) -> torch.Tensor:  # log q(i) = s1_{a_i} + s2_{b_i} - log Z  (B, m)
        return (s1.gather(1, a) + s2.gather(1, b) - log_Z).float()

    def _log_prob_cells(self, h, ids):
        return self._log_q(self._cell_logits(h), self.a[ids] * self.K + self.b[ids])

    def _log_prob_stages(self, h, ids):
        s1, s2, _, _, log_Z = self._stages(h)
        return self._staged_log_q(s1, s2, log_Z, self.a[ids], self.b[ids])

    def sample(self, h, m, gen):
        return getattr(self, f"_sample_{self.draw}")(h, m, gen)

    def sample_with(self, h, m, gen, targets):
        return getattr(self, f"_sample_{self.draw}")(h, m, gen, targets)

    def log_prob(self, h, ids):
        return getattr(self, f"_log_prob_{self.draw}")(h, ids)


class ProductQuantized:
    def fit_codebooks(self, c, gen):
        """k-means codebooks of the two halves of c: (U, a, V, b)."""
        d1, rows = c.shape[1] // 2, self._fit_rows(len(c), gen, c.device)
        U, a = self._kmeans(c[:, :d1], self._init(c[:, :d1], self.U, gen), rows)
        V, b = self._kmeans(c[:, d1:], self._init(c[:, d1:], self.V, gen), rows)
        return U, a, V, b

    def assign(self, c, U, V):
        """Nearest codewords (a, b) of c's halves."""
        d1 = U.shape[1]
        return nearest(c[:, :d1], U.detach()), nearest(c[:, d1:], V.detach())

    def split(self, h):
        return h[:, : self.U.shape[1]], h[:, self.U.shape[1]:]

    def quantized(self, a=None, b=None) -> torch.Tensor:
        """Quantized class embeddings [u_a; v_b] (n, d) (by default the index's own assignments)."""
        return torch.cat([self.U[self.a if a is None else a], self.V[self.b if b is None else b]], 1)


class ResidualQuantized:
    def fit_codebooks(self, c, gen):
        """k-means on c, then k-means on the residuals c - u_a: (U, a, V, b)."""
        rows = self._fit_rows(len(c), gen, c.device)
        U, a = self._kmeans(c, self._init(c, self.U, gen), rows)
        res = c - U[a]
        V, b = self._kmeans(res, self._init(res, self.V, gen), rows)
        return U, a, V, b

    def assign(self, c, U, V):
        a = nearest(c, U.detach())
        return a, nearest(c - U.detach()[a], V.detach())

    def split(self, h):
        return h, h

    def quantized(self, a=None, b=None) -> torch.Tensor:
        return self.U[self.a if a is None else a] + self.V[self.b if b is None else b]         # (n, d)


@SAMPLERS.register("midx_pq")
class MIDXProduct(ProductQuantized, MIDX):
    pass


@SAMPLERS.register("midx_rq")
class MIDXResidual(ResidualQuantized, MIDX):
    pass
