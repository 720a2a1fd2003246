"""Validation perplexity per epoch of Table 4 runs side by side: kept runs (history.csv) beside runs known
only from their training logs (`xcbench train`'s per-epoch lines), e.g. runs on a lent GPU that were cut
before they wrote metrics. Trains nothing.

    python studies/midx_table4/midx_seed_curves.py --kept reference/paper/results/paper/midx/table4/ptb/lstm_midx_{pq,rq}/seed0 \
        --logs studies/midx_table4/out/gpu_midx_seed1_lstm_midx_{pq,rq}.log --about "seed 1, H200" "seed 1, H200" \
        --name midx_seed_curves

Writes studies/midx_table4/out/<name>.{json,md}: per epoch each run's validation perplexity, and per run its best
epoch so far and the epoch it reached.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
LINE = re.compile(r"(?P<run>\S+/\S+) epoch (?P<e>\d+)/\d+ .*?val_ppl=(?P<v>[0-9.]+)")


def from_history(run_dir: Path) -> tuple[str, dict[int, float], str]:
    from xcbench.io import read_json

    m = read_json(run_dir / "metrics.json")
    c = m["curves"]                                                    # {column: [value per epoch]}
    curve = {int(e): float(v) for e, v in zip(c["epoch"], c["val_ppl"]) if e and v is not None}
    cut = f", cut by a session after epoch {m['cut_short_after_epoch']}" if m.get("cut_short_after_epoch") else ""
    about = f"{m['device_name']}, seed {m['seed']}{cut}, test PPL {m['metrics']['ppl']:.1f}"
    return f"{run_dir.parent.name} seed {m['seed']} (kept)", curve, about


def from_log(path: Path, about: str = "") -> tuple[str, dict[int, float], str]:
    curve, name = {}, path.stem
    for ln in path.read_text().splitlines():
        if (g := LINE.search(ln)):
            curve[int(g["e"])] = float(g["v"])
            name = g["run"].split("/")[-1]
    if not curve:
        raise SystemExit(f"{path}: no per-epoch lines of `xcbench train` (… epoch N/M … val_ppl=…) in it")
    return f"{name} ({about or path.name})", curve, f"log {path.name}, {about + ', ' if about else ''}no test PPL"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kept", type=Path, nargs="*", default=[], help="run folders with metrics.json")
    p.add_argument("--logs", type=Path, nargs="*", default=[], help="training logs of `xcbench train`")
    p.add_argument("--about", nargs="*", default=[], help="one label per log (seed, device), in the same order")
    p.add_argument("--every", type=int, default=5, help="rows: every k-th epoch, and each run's last")
    p.add_argument("--name", default="midx_seed_curves")
    a = p.parse_args()
    runs = [from_history(d) for d in a.kept] + [from_log(f, ab) for f, ab in zip(a.logs, a.about + [""] * len(a.logs))]
    last = sorted({max(c) for _, c, _ in runs})
    epochs = sorted({e for _, c, _ in runs for e in c if e == 1 or e % a.every == 0} | set(last))
    lines = ["# Validation perplexity per epoch (studies/midx_table4/midx_seed_curves.py)", ""]
    lines += [f"- {name}: {about}; best {min(c.values()):.1f} at epoch {min(c, key=c.get)} of {max(c)}"
              for name, c, about in runs]
    lines += ["", "| epoch | " + " | ".join(n for n, _, _ in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    lines += [f"| {e} | " + " | ".join(f"{c[e]:.1f}" if e in c else "" for _, c, _ in runs) + " |" for e in epochs]
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    (OUT / f"{a.name}.json").write_text(json.dumps([{"run": n, "about": ab, "val_ppl": c} for n, c, ab in runs], indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
