"""Active-class selectors: build time, selection time per batch and precision against `optimal`
(Zhang et al. 2018), and one selective-softmax step against one full-softmax step.

Class embeddings: a stated mixture, n/100 cluster centres mu_k ~ N(0, I_d / d) and
w_c = mu_k(c) + 0.5 eps_c, eps_c ~ N(0, I_d / d) (clusters of ~100 similar classes, as trained face
classifiers' rows of similar identities). A batch of B queries near their classes, h_i = w_{c_i} + 0.5 e_i,
e_i ~ N(0, I_d / d), c_i uniform (cosine to the own class about 0.9). M = 1% of n, per-example quota q = ceil(M / B). Precision =
mean_i |S_i ∩ T_q(h_i)| / q: T_q(h_i) the exact top-q of W h_i among the classes other than c_i (the
label is always active; its hardest negatives are what a selector must find), S_i the
example's own selection of q + 1 classes (room for its label and q others: HF its q + 1 re-ranked
pooled classes, optimal its exact top-(q + 1); PCA / k-means its label's group; random q + 1
uniform classes), before the batch union and the cap (at n = 10^4, M = 100 < B: the cap would keep
the labels alone). Mass = mean_i sum_{c in S_i, c != c_i} p_ic / sum_{c != c_i} p_ic, p_i = softmax(W h_i):
the share of the negatives' softmax mass (and so of their gradient) that the selection keeps. PCA's and
k-means' precision and mass count their whole group (hundreds to thousands of classes per example, see
"selected"), an upper bound of what survives the cap. Selection time: `select` of the batch with
that quota (the union of the per-example selections with the labels), median of `--repeats` after one
warm-up; the structure build (forest, k-means, PCA codes) is timed apart. Each forest is queried
with both re-rankings of the pooled classes (the text's cosine and the response w . h), by the paper's walk
(pool 1) and by walks stopped at pool x q classes (8; also 32 at 10^6), which pool larger cells, and by
the paper's walk plus `probe` best-first rounds of L more walks (7, 15, 31; selectors/forest.py); at 10^6
also 15, 23 and 31 rounds with `prefilter` 4 (the pool ranked from bfloat16 rows, the 4 q best re-scored exactly),
and 15, 16 and 20 rounds' walks made in rounds of 5 L, 8 L and 10 L (`probe_width` 5, 8, 10; with the first pass).
Library indexes where installed: faiss IVF at several nprobe; Annoy (10 trees; the public HF code's
angular metric and Annoy's dot) searching 1, 4, 16 and 64 times its default search_k (trees x q nodes).
The re-rank's floor (`rerank_floor`): P sorted random rows gathered per query and multiplied by it,
against exact top-k in the same run, the least that any selector re-ranking P pooled classes pays.

    python benchmarks/selector_bench.py                       # n in {1e4, 1e5, 1e6}, B = 256, d = 256
    python benchmarks/selector_bench.py --n 10000 --repeats 2 --name selectors_small
    python benchmarks/selector_bench.py --trained results/paper/class_selection/fig2/synthetic-faces-87k/full/seed0 \
        --name selectors_trained     # a trained run's class embeddings and features instead of the mixture
    python benchmarks/selector_bench.py --device cuda --name selectors_cuda   # on the GPU: exact top-k is torch's
Writes benchmarks/out/<name>.{json,md,png} (default selectors). The mixture and the queries are drawn on the
CPU from the same seeds whatever the device, then moved to it; times on CUDA wait for the device.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import selector_common as sc
import torch
from selector_common import has, mixture_problem, timed, trained
from selector_costs import kmeans_compare, rerank_floor, step_ratio
from selector_report import OUT, render


def POOLS(n: int) -> tuple[int, ...]:
    """HF walks: the paper's (1) and ones stopped at pool x q classes (selectors/forest.py)."""
    return (1, 8, 32) if n >= 10 ** 6 else (1, 8)


NPROBES = (4, 8, 32, 128)


PROBES = (7, 15, 31)
PREFILTER = 4  # at 10^6, also rank the pool from bfloat16 rows and re-score the 4 q best exactly (forest.py)
WIDE = ((15, 5), (16, 8), (20, 10))  # at 10^6, (probe, probe_width): the same walks popped w L sides a round (forest.py)


ANNOY_SEARCH = (1, 4, 16, 64)  # Annoy's search_k in multiples of its default, trees x q nodes


def variants(name: str, n: int, params: dict, q: int) -> list[dict]:
    """Query-time settings tried on one built structure: HF's re-rankings, pools and best-first probes
    (probe rounds of L walks each, ranked by response, also by the text's cosine at 15; forests of at
    most 10 trees: with more, the walks alone cost more than exact top-k), faiss's nprobe."""
    if name == "hf":
        probes = [{"rerank": "inner", "pool": 1, "probe": k} for k in PROBES] + [{"rerank": "cosine", "pool": 1, "probe": 15}]
        if n >= 10 ** 6:  # where the pool is gathered row by row (rerank.DENSE_RATIO): the bfloat16 first pass
            probes += [{"rerank": "inner", "pool": 1, "probe": k, "prefilter": PREFILTER} for k in (15, 23, 31)]
            probes += [{"rerank": "inner", "pool": 1, "probe": k, "prefilter": PREFILTER, "probe_width": w} for k, w in WIDE]
        return ([{"rerank": r, "pool": p, "probe": 0} for p in POOLS(n) for r in ("cosine", "inner")]
                + (probes if params["trees"] <= 10 else []))
    if name == "faiss_ivf":
        return [{"nprobe": p} for p in NPROBES]
    if name == "annoy":
        return [{"search_k": s * params["trees"] * q} for s in ANNOY_SEARCH]
    return [{}]


def configs(n: int) -> list[tuple[str, str, dict]]:
    out = [("optimal", "optimal", {}), ("random", "random", {})]
    out += [(f"pca_hash bits={b}", "pca_hash", {"bits": b}) for b in (8, 12, 16)]
    out += [("kmeans 1024", "kmeans", {"clusters": 1024, "iters": 5})]
    if has("faiss"):  # the library index a practitioner would use (the `ann` extra)
        out += [("faiss_ivf nlist=1024", "faiss_ivf", {"nlist": 1024})]  # one index, searched at every NPROBES
    if has("annoy"):  # the public HF code's index (the `annoy` extra): its angular metric, and Annoy's dot
        out += [(f"annoy trees=10 {m}", "annoy", {"trees": 10, "metric": m}) for m in ("angular", "dot")]
    if n >= 10 ** 6:  # a build grows every tree over all n rows (a minute per 5 trees, one thread): fewer settings
        return out + [(f"hf L={L} leaf=64", "hf", {"trees": L, "leaf": 64}) for L in (5, 10)]
    for L in (5, 10, 20, 50):
        out += [(f"hf L={L} leaf={leaf}", "hf", {"trees": L, "leaf": leaf}) for leaf in (16, 64)]
    return out


def per_example_mask(sel, name: str, h: torch.Tensor, y: torch.Tensor, q: int) -> torch.Tensor:
    """(B, n) bool: each query's own selection (before the batch union and the cap)."""
    mask = torch.zeros(len(h), sel.n_classes, dtype=torch.bool, device=h.device)
    if name == "hf":
        rows, cls = sel.per_example(h, q)
        mask[rows, cls] = True
    elif name in ("pca_hash", "kmeans"):  # the label's whole group
        mask = sel.keys.unsqueeze(0) == sel.keys[y].unsqueeze(1)
    elif name in ("optimal", "faiss_ivf", "annoy"):  # its own (approximate) top-q (annoy: by its metric)
        mask.scatter_(1, sel.candidates(h, y, q, None), True)
    else:
        mask.scatter_(1, torch.randint(sel.n_classes, (len(h), q), generator=torch.Generator().manual_seed(4)).to(h.device), True)
    return mask


def scores_of(mask: torch.Tensor, top: torch.Tensor, p_neg: torch.Tensor) -> tuple[float, float]:
    """(precision, mass): the share of each query's exact top-q negatives in its selection, and the share
    of its negative softmax mass sum_{c != y} p_c that the selection covers (what the restricted softmax's
    gradient keeps), both averaged over the queries."""
    return mask.gather(1, top).double().mean().item(), ((p_neg * mask).sum(1) / p_neg.sum(1)).mean().item()


def bench_n(n: int, d: int, B: int, repeats: int) -> list[dict]:
    W, h, y = mixture_problem(n, d, B)
    return bench(W.to(sc.DEV), h.to(sc.DEV), y.to(sc.DEV), repeats)


def bench(W: torch.Tensor, h: torch.Tensor, y: torch.Tensor, repeats: int) -> list[dict]:
    """Every selector setting of configs(n) on class embeddings W (n, d) and queries h (B, d) of labels y."""
    from xcbench.registry import SELECTORS

    (n, d), B = W.shape, len(h)
    M = max(1, n // 100)
    q = math.ceil(M / B)
    with torch.no_grad():
        s_neg = (h @ W.T).scatter(1, y.unsqueeze(1), -math.inf)                                # (B, n) label excluded
        top = s_neg.topk(q, dim=1).indices                                                      # (B, q) hardest negatives
        p_neg = torch.softmax(s_neg, 1)                                                         # (B, n), 0 at the label
        del s_neg
    q, M = q + 1, (q + 1) * B  # each example selects q + 1 classes: room for its label and its q hardest negatives
    rows = []
    for label, name, params in configs(n):
        if SELECTORS.get(name).requires and sc.DEV.type != "cpu":
            continue  # the library indexes (faiss-cpu, Annoy) search host arrays: not GPU selectors
        sel = SELECTORS.get(name)(n, **params).to(sc.DEV)
        sel.bind(W)
        sc.sync()
        t0 = time.perf_counter()
        if sel.needs_index:
            sel.update(W, torch.Generator().manual_seed(2))
        sc.sync()
        build = time.perf_counter() - t0
        for var in variants(name, n, params, q):  # one structure, queried several ways
            for k, v in var.items():
                setattr(sel, k, v)
            if name == "hf":
                var = {"prefilter": 0, "probe_width": 1, **var}  # each setting states its own (the selector keeps the last one set)
            tag = " ".join([label] + [str(v) if k == "rerank" else f"{k}={v}" for k, v in var.items()
                                      if not (k in ("pool", "probe_width") and v == 1) and not (k in ("probe", "prefilter") and v == 0)])
            sel_s, S = timed(lambda: sel.select(h, y, M, torch.Generator().manual_seed(3)), repeats)
            prec, mass = scores_of(per_example_mask(sel, name, h, y, q), top, p_neg)
            rows.append({"n": n, "d": d, "B": B, "M": max(1, n // 100), "q": q - 1, "selector": tag, "build_s": build,
                         "select_s": sel_s, "precision": prec, "mass": mass, "selected": len(S)})
            if name == "hf":  # distinct classes re-ranked per query (the forest's last query)
                rows[-1]["pooled"] = sel.forest.pooled.float().mean().item()
            print(f"n={n:>8} {tag:<28} build {build:8.3f} s  select {1000 * sel_s:9.2f} ms  precision {prec:.3f}"
                  f"  mass {mass:.3f}", flush=True)
        sel = None  # released before the next selector is built
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[10 ** 4, 10 ** 5, 10 ** 6])
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--step-n", type=int, nargs="*", default=[10 ** 6])
    p.add_argument("--kmeans-n", type=int, nargs="*", default=[10 ** 6], help="k-means comparison sizes (needs faiss)")
    p.add_argument("--floor-only", action="store_true",
                   help="only the re-rank's floor at --step-n (and its cheaper row copies): no selectors, steps or k-means")
    p.add_argument("--name", default="selectors")
    p.add_argument("--render-only", action="store_true",
                   help="rewrite OUT/<name>.md and .png from OUT/<name>.json without measuring")
    p.add_argument("--trained", type=Path, metavar="RUN_DIR",
                   help="a class-selection run folder with checkpoint.pt (.../<dataset>/<method>/seed0): its trained "
                        "class embeddings and encoder features replace the mixture (no step or k-means tables)")
    p.add_argument("--experiment", default="config/experiments/class_selection/fig2.yaml")
    p.add_argument("--processed", help="the run's dataset.npz (default data/processed/<dataset>/dataset.npz)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                   help="where the embeddings, queries, selectors and steps live (faiss_ivf and the k-means table: CPU only)")
    a = p.parse_args()
    if a.render_only:
        saved = json.loads((OUT / f"{a.name}.json").read_text())
        return render(saved["rows"], saved["steps"], saved["kmeans"], a.name, saved["meta"], saved.get("floor", ()))
    from xcbench.device import device_name, pick_device

    sc.DEV = pick_device(a.device)
    OUT.mkdir(exist_ok=True)
    meta = {"threads": torch.get_num_threads(), "machine": platform.machine(), "torch": torch.__version__,
            "device": device_name(sc.DEV), "cuda": sc.DEV.type == "cuda"}
    if a.trained:
        ds = a.trained.parent.parent.name
        W, h, y, meta["embeddings"] = trained(a.trained, a.experiment, ds,
                                              a.processed or f"data/processed/{ds}/dataset.npz", a.batch)
        rows, steps, km, floor = bench(W.to(sc.DEV), h.to(sc.DEV), y.to(sc.DEV), a.repeats), [], [], []
    elif a.floor_only:
        rows, steps, km = [], [], []
        floor = [rerank_floor(n, a.d, a.batch, (2500, 5000, 10000, 20000), a.repeats) for n in a.step_n]
    else:
        rows = [r for n in a.n for r in bench_n(n, a.d, a.batch, a.repeats)]
        steps = [step_ratio(n, a.d, a.batch, a.repeats) for n in a.step_n]
        km = [r for n in a.kmeans_n for r in kmeans_compare(n, a.d)]
        floor = [rerank_floor(n, a.d, a.batch, (2500, 5000, 10000, 20000), a.repeats) for n in a.step_n]
    render(rows, steps, km, a.name, meta, floor)


if __name__ == "__main__":
    main()
