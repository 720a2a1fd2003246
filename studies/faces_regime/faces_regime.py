"""How hard is a synthetic-faces set? Nearest-centre top-1 over a grid of latent dimension and noise.

For each (latent_dim r, noise sigma) the generator of data/faces.py makes `--ids` identities with
`--train` samples each; the class centres are the means of the training features (rescaled as the
multiclass task does), and one held-out sample per identity is assigned to the centre of highest
cosine. Top-1 near 1 means every identity is far from all others (the in-batch negatives of a
large-K batch then carry almost no information, and any method separates the classes); near 0
means the features carry little identity. Also reported: the mean cosine of a sample to its own
centre and to its nearest other centre. The experiment files state which point they use and why.

    python studies/faces_regime/faces_regime.py --ids 40000 --dim 128
    python studies/faces_regime/faces_regime.py --ids 360232 --dim 512 --train 10 --latent 24 32 --sigma 0.7 \
        --queries 5000 --name faces_regime_360k
Writes studies/faces_regime/out/<name>.{json,md} (default faces_regime).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent / "out"


def measure(ids: int, dim: int, r: int, sigma: float, per_train: int, queries: int, chunk: int = 2048) -> dict:
    from xcbench.data.faces import FaceModel

    t0 = time.perf_counter()
    fm = FaceModel(seed=0, n_ids=ids, dim=dim, per_id={"train": per_train, "val": 1}, n_verif_ids=1,
                   latent_dim=r, sigma=sigma)
    C = torch.zeros(ids, dim, dtype=torch.float64)                                          # (K, d) sums
    n = fm.size("train")
    for s in range(0, n, 65536):  # streamed: the 360K set never sits in memory
        k = np.arange(s, min(n, s + 65536))
        C.index_add_(0, torch.from_numpy(k // per_train), torch.from_numpy(fm.rows("train", k)).double())
    C = torch.nn.functional.normalize(C, dim=1).float()
    q = np.sort(np.random.default_rng(0).permutation(ids)[:queries]) if queries < ids else np.arange(ids)
    xv = torch.nn.functional.normalize(torch.from_numpy(fm.rows("val", q)), dim=1)          # val: 1 per identity
    yv = torch.from_numpy(q)
    hit, own, other = 0, 0.0, 0.0
    for s in range(0, len(q), chunk):
        S = xv[s:s + chunk] @ C.T                                                           # (b, K)
        yb = yv[s:s + chunk]
        hit += (S.argmax(1) == yb).sum().item()
        own += S.gather(1, yb[:, None]).sum().item()
        other += S.scatter(1, yb[:, None], -2.0).max(1).values.sum().item()
    return {"ids": ids, "dim": dim, "latent_dim": r, "sigma": sigma, "train_per_id": per_train, "queries": len(q),
            "nearest_centre_top1": hit / len(q), "cos_own_centre": own / len(q), "cos_nearest_other": other / len(q),
            "seconds": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ids", type=int, default=40000)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--train", type=int, default=5)
    p.add_argument("--latent", type=int, nargs="*", default=[16, 24, 64])
    p.add_argument("--sigma", type=float, nargs="*", default=[0.35, 0.7, 1.0])
    p.add_argument("--queries", type=int, default=10 ** 9, help="held-out samples scored (default: one per identity)")
    p.add_argument("--name", default="faces_regime", help="output file stem in studies/faces_regime/out/")
    a = p.parse_args()
    rows = []
    for r in a.latent:
        for s in a.sigma:
            rows.append(measure(a.ids, a.dim, r, s, a.train, a.queries))
            print(json.dumps(rows[-1]), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.name}.json").write_text(json.dumps(rows, indent=1))
    lines = [f"# Synthetic faces: nearest-centre top-1 ({a.ids:,} identities, d = {a.dim}, {a.train} training "
             f"samples per identity, centres = training means, {rows[0]['queries']:,} held-out samples scored)", "",
             "| latent dim | sigma | nearest-centre top-1 | cos to own centre | cos to nearest other |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['latent_dim']} | {r['sigma']} | {r['nearest_centre_top1']:.3f} | {r['cos_own_centre']:.3f} | "
              f"{r['cos_nearest_other']:.3f} |" for r in rows]
    (OUT / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
