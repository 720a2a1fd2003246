"""Evaluation metrics as pure tensor functions.

Conventions. `topk` is (B, k) predicted class ids in decreasing score order. `y` holds the true
labels: (B,) for single-label tasks or (B, Lmax) padded with -1 for multi-label ones. Rows with
no true label count as 0 in P@k, nDCG@k and recall@k (they stay in the mean, as in the XC
repository's evaluation code).

    P@k     = 1/B sum_i 1/k sum_{j<k} [topk_ij in y_i]
    nDCG@k  = 1/B sum_i DCG_i / IDCG_i,  DCG_i = sum_{j<k} [topk_ij in y_i] / log2(j + 2),
              IDCG_i = sum_{j < min(k, |y_i|)} 1 / log2(j + 2)
    PSP@k   = sum_i sum_{j<k} [topk_ij in y_i] p_{topk_ij}^-1  /  sum_i (best k of p_l^-1 over l in y_i)
              with Jain et al. (2016) inverse propensities p_l^-1 = 1 + C (N_l + B)^-A,
              C = (ln N - 1)(B + 1)^A   (normalised PSP, as pyxclib and napkinXC report it)
    R@k     = 1/B sum_i |topk_i[:k] & y_i| / |y_i|
    ppl     = exp(total NLL / number of tokens)
    softmax_loss = 1/|{i: y_i nonempty}| sum_i 1/|y_i| sum_{t in y_i} (log sum_c e^{o_ic} - o_it), the full softmax loss
              (Rawat et al. 2019, eq. 3) of the scores o, averaged over each row's positives (the multi-label
              reduction the sampled heads train on in expectation: one positive drawn per row); rows without
              labels are left out
    CP_K    = sum of the K largest softmax probabilities of a row (Zhang et al. 2018, eq. 3)
    NCG_K   = (g . g_K)^2 / (|g|^2 |g_K|^2), g the softmax-CE gradient w.r.t. W, g_K its rows of the
              top-K classes (eq. 5); with g_i = (p_i - [i = y]) h it is sum_{i in T_K} c_i^2 / sum_i c_i^2,
              c_i = p_i - [i = y] (h factors out)
"""

from __future__ import annotations

import math

import torch


def _as_multi(y: torch.Tensor) -> torch.Tensor:
    return y.unsqueeze(1) if y.dim() == 1 else y


def hits(topk: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(B, k) bool: is the j-th prediction of row i a true label."""
    y = _as_multi(y)
    return ((topk.unsqueeze(2) == y.unsqueeze(1)) & (y.unsqueeze(1) >= 0)).any(2)


def n_labels(y: torch.Tensor) -> torch.Tensor:
    return (_as_multi(y) >= 0).sum(1)


def precision_at_k(topk: torch.Tensor, y: torch.Tensor, k: int) -> float:
    return hits(topk[:, :k], y).double().sum(1).div(k).mean().item()


def _discount(k: int, device) -> torch.Tensor:
    return 1.0 / torch.log2(torch.arange(k, device=device, dtype=torch.float64) + 2)


def ndcg_at_k(topk: torch.Tensor, y: torch.Tensor, k: int) -> float:
    disc = _discount(k, topk.device)                                           # (k,)
    dcg = (hits(topk[:, :k], y).double() * disc).sum(1)                        # (B,)
    cum = torch.cat([torch.zeros(1, dtype=torch.float64, device=topk.device), disc.cumsum(0)])
    idcg = cum[n_labels(y).clamp(max=k)]                                       # (B,)
    return torch.where(idcg > 0, dcg / idcg.clamp(min=1e-12), torch.zeros_like(dcg)).mean().item()


def recall_at_k(topk: torch.Tensor, y: torch.Tensor, k: int) -> float:
    n = n_labels(y)
    h = hits(topk[:, :k], y).double().sum(1)
    return torch.where(n > 0, h / n.clamp(min=1), torch.zeros_like(h)).mean().item()


def jain_inverse_propensity(label_counts: torch.Tensor, n: int, A: float = 0.55, B: float = 1.5) -> torch.Tensor:
    C = (math.log(n) - 1.0) * (B + 1.0) ** A
    return 1.0 + C * (label_counts.double() + B) ** (-A)


def psp_at_k(topk: torch.Tensor, y: torch.Tensor, inv_prop: torch.Tensor, k: int) -> float:
    y = _as_multi(y)
    num = (hits(topk[:, :k], y).double() * inv_prop[topk[:, :k]]).sum()
    w_true = torch.where(y >= 0, inv_prop[y.clamp(min=0)], torch.zeros((), dtype=torch.float64))  # (B, Lmax)
    den = w_true.topk(min(k, y.shape[1]), dim=1).values.sum()
    return (num / den).item() if den > 0 else 0.0


def perplexity(total_nll: float, n_tokens: int) -> float:
    return math.exp(total_nll / n_tokens)


def tpr_at_fpr(scores: torch.Tensor, same: torch.Tensor, fpr: float) -> float:
    """Verification TPR at a false-positive rate: threshold t is the smallest score such that at
    most floor(fpr * #negatives) negative pairs score strictly above t."""
    neg = scores[~same].sort(descending=True).values
    pos = scores[same]
    j = int(math.floor(fpr * neg.numel()))
    t = neg[j] if j < neg.numel() else torch.tensor(-math.inf)
    return (pos > t).double().mean().item()


def topk_hit_rate(scores: torch.Tensor, query_ids: torch.Tensor, gallery_ids: torch.Tensor, k: int) -> float:
    """Identification: share of queries whose identity is among the k best-scored gallery items."""
    top = scores.topk(k, dim=1).indices                                        # (Q, k)
    return (gallery_ids[top] == query_ids.unsqueeze(1)).any(1).double().mean().item()


def cross_entropy_full(h: torch.Tensor, W: torch.Tensor, y: torch.Tensor, b: torch.Tensor | None = None,
                       chunk: int = 65536) -> torch.Tensor:
    """Per-example full softmax cross-entropy -log softmax(h W^T + b)_y, computed over class chunks
    of size `chunk` so that a (B, C) logit matrix is never held for huge C.  Returns (B,)."""
    lse = torch.full((h.shape[0],), -math.inf, dtype=h.dtype, device=h.device)
    for s in range(0, W.shape[0], chunk):
        o = h @ W[s:s + chunk].T                                               # (B, c)
        if b is not None:
            o = o + b[s:s + chunk]
        lse = torch.logaddexp(lse, torch.logsumexp(o, 1))
    o_y = (h * W[y]).sum(1) + (b[y] if b is not None else 0)
    return lse - o_y


def softmax_loss_rows(o: torch.Tensor, y: torch.Tensor) -> tuple[float, int]:
    """Sum over the rows with a label of the full softmax loss of logits o (B, C) (`softmax_loss` above),
    and how many rows that is: summed so that batches add up to the test set's mean. The log-sum-exp runs in o's
    dtype (it subtracts the row max; a float64 copy of (1024, 670K) scores would be 5.5 GB), the sums in float64."""
    y = _as_multi(y)
    mask = y >= 0                                                                    # (B, Lmax)
    nll = torch.logsumexp(o, 1, keepdim=True) - o.gather(1, y.clamp(min=0))          # (B, Lmax)
    n = mask.sum(1)                                                                  # (B,)
    keep = n > 0
    per = (nll.double() * mask).sum(1)[keep] / n[keep]                               # (rows with labels,)
    return per.sum().item(), int(keep.sum().item())


def cp_at_k(o: torch.Tensor, ks: list[int]) -> list[float]:
    """Average top-K cumulative probability (eq. 3) of logits o (B, C), for each K in ks."""
    p = torch.softmax(o.double(), 1)
    top = p.topk(min(max(ks), p.shape[1]), dim=1).values.cumsum(1)                  # (B, Kmax)
    return [top[:, min(k, top.shape[1]) - 1].mean().item() for k in ks]


def ncg_at_k(o: torch.Tensor, y: torch.Tensor, ks: list[int]) -> list[float]:
    """Average normalised top-K cumulative gradient energy (eq. 5) of logits o (B, C), labels y (B,)."""
    p = torch.softmax(o.double(), 1)
    c = p.clone()
    c[torch.arange(len(y), device=y.device), y] -= 1.0                               # (B, C) gradient coefficients
    order = p.topk(min(max(ks), p.shape[1]), dim=1).indices                         # T_K by response
    e = c.gather(1, order).square().cumsum(1) / c.square().sum(1, keepdim=True)    # (B, Kmax)
    return [e[:, min(k, e.shape[1]) - 1].mean().item() for k in ks]
