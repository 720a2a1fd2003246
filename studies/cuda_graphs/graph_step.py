"""Would CUDA graphs bring MIDX Table 4's GPU steps to their floor? One training step captured whole.

With `train.draws: device` a step makes no host synchronisation (tests/test_cuda.py), yet on an H200 the PTB
steps stay at 7-12 ms (LSTM) and 23-27 ms (Transformer) against matmul floors of 0.1-0.3 ms
(benchmarks/out/train_step_midx_table4_paper_ptb_cuda_draws.md): the host launches kernels more slowly than the GPU
runs them. This captures one whole training step (loss, backward, clipping, optimizer, after-step hook) with
`xcbench.graphs.GraphedStep` (what `train.cuda_graph` uses: warm-up steps on a side stream, one capture) and
replays it on each batch copied into the captured input buffers; per method it reports the chained eager step
and the replayed step (same batches, ms a step), the mean loss of each (consecutive stretches of one run), or
why capture failed.

    python studies/cuda_graphs/graph_step.py --processed data/processed/ptb/dataset.npz --out-dir /tmp/graphs
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from built import build  # noqa: E402


def chained_ms(step, batches) -> tuple[float, float]:
    """(ms a step over `batches` back to back, mean of the returned losses), one synchronisation at the end."""
    losses = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for b in batches:
        losses.append(step(b))
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t0) / len(batches), float(torch.stack(losses).float().mean())


def one(exp, task, dataset, method, steps, device) -> dict:
    from xcbench.graphs import GraphedStep
    from xcbench.seed import torch_generator
    from xcbench.step import train_step

    _, cfg, model, opt = build(exp, task, dataset, method, device, 0, "device")
    model.head.on_epoch_start(0, torch_generator(0, "index"))
    gen = torch_generator(0, "loss", device)
    clip = cfg.get("grad_clip")
    batches = list(itertools.islice(task.train_batches(int(cfg["batch_size"]), torch_generator(0, "batches")), steps + 3))

    def eager(b):
        return train_step(model, opt, *b, gen, 1, clip).detach()

    for b in batches[:3]:
        eager(b)
    eager_ms, eager_loss = chained_ms(eager, batches[3:])
    row = {"method": method, "eager_ms": eager_ms, "eager_loss": eager_loss}
    try:  # the training loop's own capture (xcbench.graphs): WARMUP eager steps on a side stream, then one capture
        graphed = GraphedStep(lambda x, y, idx: train_step(model, opt, x, y, idx, gen, 1, clip), (gen,))
        for b in batches[:3]:
            graphed(*b)
        row["graph_ms"], row["graph_loss"] = chained_ms(lambda b: graphed(*b).detach().clone(), batches[3:])
        row["speedup"] = eager_ms / row["graph_ms"]
    except Exception as e:  # noqa: BLE001 (a study: the reason capture fails is the finding)
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="config/experiments/midx/table4.yaml")
    p.add_argument("--dataset", default="ptb")
    p.add_argument("--processed", required=True)
    p.add_argument("--methods", nargs="+", default=["lstm_full", "lstm_midx_pq", "lstm_midx_rq", "tf_full", "tf_midx_pq"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "out")
    a = p.parse_args()
    from xcbench.catalogue import dataset_entry, load_datasets
    from xcbench.config import load_experiment, resolve_experiment
    from xcbench.device import deterministic_kernels, device_name
    from xcbench.runtime import configure_process
    from xcbench.tasks.base import make_task

    configure_process(1)
    device = torch.device("cuda")
    deterministic_kernels(device)
    exp = resolve_experiment(load_experiment(a.experiment), "paper")
    task = make_task(exp, dataset_entry(a.dataset, load_datasets()), a.processed, None, device, 0, dataset=a.dataset)
    rows = []
    for m in a.methods:
        rows.append({**one(exp, task, a.dataset, m, a.steps, device), "device": device_name(device),
                     "torch": torch.__version__})
        print(json.dumps(rows[-1]), flush=True)
    lines = [f"# One training step captured as a CUDA graph: {exp['paper']}/{exp['artifact']}, paper scale, {a.dataset} "
             f"({rows[0]['device']}, torch {rows[0]['torch']}; draws on the device; {a.steps} steps chained)", "",
             "| method | eager ms / step | graph ms / step | speedup | eager mean loss | graph mean loss | capture |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        g = f"{r['graph_ms']:.2f} | {r['speedup']:.1f}x" if "graph_ms" in r else "- | -"
        gl = f"{r['graph_loss']:.3f}" if "graph_loss" in r else "-"
        lines.append(f"| {r['method']} | {r['eager_ms']:.2f} | {g} | {r['eager_loss']:.3f} | {gl} | {r.get('error', 'ok')} |")
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / "graph_step.json").write_text(json.dumps(rows, indent=1))
    (a.out_dir / "graph_step.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
