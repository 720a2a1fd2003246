"""The same RF-softmax run (one spec, one seed, CPU draws) trained on two devices: validation perplexity per
epoch side by side, and their ratio; writes out/rff_device.{md,json,png}.

    python studies/rff_device/compare.py reference/paper/results/paper/rff/fig2/ptb/rff_d128/seed0 \
        studies/rff_device/runs/h200_rff_d128
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


def curve(run: Path) -> tuple[str, dict[int, float]]:
    """(device name, {epoch: validation perplexity}) of one run folder (epoch 0, untrained, left out)."""
    m = json.loads((run / "metrics.json").read_text())
    rows = list(csv.DictReader((run / "history.csv").open()))
    return str(m.get("device_name") or m.get("device")), {int(r["epoch"]): float(r["val_ppl"]) for r in rows
                                                         if int(r["epoch"]) > 0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs=2, type=Path, help="two folders of the same run (metrics.json, history.csv)")
    a = p.parse_args()
    (da, ca), (db, cb) = curve(a.runs[0]), curve(a.runs[1])
    both = sorted(set(ca) & set(cb))
    rows = [{"epoch": e, da: ca[e], db: cb[e], "ratio": ca[e] / cb[e]} for e in both]
    OUT.mkdir(exist_ok=True)
    (OUT / "rff_device.json").write_text(json.dumps({"runs": [str(r) for r in a.runs], "rows": rows}, indent=1))
    lines = [f"# The same run on two devices: validation perplexity per epoch ({a.runs[0]} vs {a.runs[1]})", "",
             f"| epoch | {da} | {db} | ratio |", "|---|---|---|---|"]
    lines += [f"| {r['epoch']} | {r[da]:.1f} | {r[db]:.1f} | {r['ratio']:.3f} |" for r in rows]
    (OUT / "rff_device.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, c, style in ((da, ca, "-o"), (db, cb, "--s")):
        ax.plot(sorted(c), [c[e] for e in sorted(c)], style, label=name, markersize=4)
    ax.set(xlabel="epoch", ylabel="validation perplexity", yscale="log")
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(OUT / "rff_device.png", dpi=150)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
