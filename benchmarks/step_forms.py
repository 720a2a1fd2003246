"""One run's training step in the forms the package has computed it in: is the registered form as fast as it
should be, and does it give the kept runs' weights bit for bit? The forms differ in four places:

  clip       global-norm clipping, ||g||_2^2 = sum over the gradients of their float64 sums of squares
             (optim/weights.clip_grad_norm): `two buffers` g.double().square().sum(), a float64 copy and a
             second fresh buffer for the squares (the kept runs up to 2026-12-01); `in place` the copy squared
             in place (registered: the same squares in the same tensor, so the same sums); `torch`
             torch.nn.utils.clip_grad_norm_ (foreach, float32 norms: it rounds differently, for reference)
  target q   with `correct: both` the head needs log q of each target beside the draws: `twice` sample, then
             log_prob (the kept runs up to 2026-12-01; an exact sampler scored all n classes twice); `once`
             Sampler.sample_with (registered: the exact samplers gather the targets' log q from the scores the
             draws came from)
  gather     a kernel tree's deep levels score each draw's node by gathering its row (samplers/kernel_tree.py):
             `at once` one (B, k, D) gather and one bmm up to 256 MiB (the kept runs up to 2026-12-04); `in chunks`
             GATHER_BYTES of queries at a time (registered on the CPU: chunks of two queries or more round as the one
             product does)
  nu lme     the SCENT family's head (heads/minmin.py) needs logmeanexp_j R_ij over the (B, B) in-batch logits for
             its first visits and its nu lag: `twice` the head's and the dual rule's own (the kept runs up to
             2026-12-04); `once` the head hands its lme to DualRule.update (registered: the same function of the same
             tensor, so the same bits)

It times the clip alone on one step's gradients, then whole training steps (loss, backward, clip, optimizer)
of every form in turn on the same batches; `identical`: the weights after the timed steps equal the kept
form's bit for bit. PTB's LSTM language models clip at 0.25 every step, their two (10^4, 200) tables make the
float64 passes large beside a 2-layer LSTM of width 200, and Sphere scores 700 queries against 10^4 classes
(a run without grad_clip, as SCENT's, has no `clip alone` rows; `--name` keeps each study's table apart):

    python benchmarks/step_forms.py --experiment config/experiments/midx/fig7a.yaml --scale paper --dataset ptb \\
        --processed data/processed/ptb/dataset.npz --methods uniform_m5 rq_m50 sphere_m5 --threads 1

    python benchmarks/step_forms.py --experiment config/experiments/scent/table_final.yaml --scale paper \\
        --dataset synthetic-faces-360k --processed data/processed/synthetic-faces-360k/dataset.npz \\
        --methods scent sox sgd umax softplus --visits 3 --name step_forms_scent

Writes benchmarks/out/<name>.{json,md} (default step_forms).
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time
import types

import torch
from built import build, experiment_task, same_weights, steps_in_turn
from common import OUT, write_outputs

from xcbench.runtime import configure_process


@torch.no_grad()
def clip_two_buffers(params, max_norm: float) -> torch.Tensor:
    """The clip as it was before 2026-12-01 (dense gradients only): a second float64 buffer for the squares."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.sqrt(sum((g.double().square().sum() for g in grads), torch.zeros((), dtype=torch.float64)))
    factor = torch.where(norm > max_norm, max_norm / (norm + 1e-6), torch.ones_like(norm))
    for g in grads:
        g.mul_(factor.to(g.dtype))
    return norm


def clips() -> dict:
    from xcbench.optim.weights import clip_grad_norm

    return {"two buffers": clip_two_buffers, "in place": clip_grad_norm,
            "torch": lambda ps, c: torch.nn.utils.clip_grad_norm_(list(ps), c, foreach=True)}


# form: (clip, target q, gather, nu lme); the first is what the kept runs were trained with, the last but one is
# registered
FORMS = {"kept": ("two buffers", "twice", "at once", "twice"), "clip in place": ("in place", "twice", "at once", "twice"),
         "target q once": ("in place", "once", "at once", "twice"),
         "registered": ("in place", "once", "in chunks", "once"), "torch clip": ("torch", "once", "in chunks", "once")}
REGISTERED = "registered"


def gathers() -> dict:
    """The kernel tree's GATHER_ONCE for each gather form: one product up to 256 MiB, or the registered bound."""
    import xcbench.samplers.kernel_tree as kt

    return {"at once": {"cpu": 256 << 20, "cuda": 256 << 20}, "in chunks": kt.GATHER_ONCE}


def step_with(clip, gather_once: dict):
    """step.train_step with `clip` in place of the registered clip and `gather_once` as the kernel tree's
    GATHER_ONCE (the modules' names, swapped for the call)."""
    import xcbench.samplers.kernel_tree as kt
    import xcbench.step as step_mod

    def step(*args):
        real = step_mod.clip_grad_norm, kt.GATHER_ONCE
        step_mod.clip_grad_norm, kt.GATHER_ONCE = clip, gather_once
        try:
            return step_mod.train_step(*args)
        finally:
            step_mod.clip_grad_norm, kt.GATHER_ONCE = real
    return step


def score_twice(model) -> None:
    """The head's sampler answers `sample_with` as sample, then log_prob (the base class's form)."""
    from xcbench.samplers.base import Sampler

    sampler = getattr(model.head, "sampler", None)
    if sampler is not None:
        sampler.sample_with = types.MethodType(Sampler.sample_with, sampler)


def own_lme(update):
    """A dual rule's `update` that computes its own logmeanexp, ignoring the one the head hands it (the kept form)."""
    return lambda nu, R, mask, lme=None: update(nu, R, mask)


def lme_twice(model) -> None:
    """The head's dual rule in the kept form (own_lme)."""
    rule = getattr(model.head, "rule", None)
    if rule is not None:
        rule.update = own_lme(rule.update)


def lme_alone(model, batch, rounds: int) -> dict[str, float]:
    """Fewest seconds (of `rounds`: the cost without the machine's other load) of the head's loss and backward
    with the dual rule's lme computed twice (kept) and once, in turn on one model and one batch (the forms' own
    models differ in where their weights lie in memory, up to 30% apart in step time whatever their form)."""
    from xcbench.seed import torch_generator

    rule, update = model.head.rule, model.head.rule.update
    buffers = [(b, b.clone()) for b in model.buffers()]  # nu and its first-visit flags, restored for the timed steps
    forms = {"twice": own_lme(update), "once": update}
    times = {f: [] for f in forms}
    for r in range(rounds + 2):
        for f, form in list(forms.items())[:: 1 - 2 * (r % 2)]:  # each form first in every other round
            rule.update = form
            t0 = time.perf_counter()
            model.loss(*batch, torch_generator(0, "loss")).backward()
            times[f].append(time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
    rule.update = update
    for b, saved in buffers:
        b.copy_(saved)
    return {f: min(ts[2:]) for f, ts in times.items()}


def clip_alone(model, batch, c: float, rounds: int) -> dict[str, float]:
    """Median seconds of each clip on the gradients of one backward (fresh copies each call)."""
    from xcbench.seed import torch_generator

    model.loss(*batch, torch_generator(0, "loss")).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    times = {f: [] for f in clips()}
    for _ in range(rounds + 2):
        for f, clip in clips().items():
            for p, g in zip(model.parameters(), grads):
                p.grad = g.clone()
            t0 = time.perf_counter()
            clip(model.parameters(), c)
            times[f].append(time.perf_counter() - t0)
    for p in model.parameters():
        p.grad = None
    mib = sum(g.numel() for g in grads) * 4 / 2 ** 20
    return {"mib": mib, **{f: statistics.median(ts[2:]) for f, ts in times.items()}}


def measure(a) -> list[dict]:
    from xcbench.seed import torch_generator

    device = torch.device("cpu")
    exp, task = experiment_task(a.experiment, a.scale, a.dataset, a.processed, a.features, device)
    out = []
    for method in a.methods or list(exp["methods"]):
        runs = {}
        for form, (clip, target_q, gather, lme) in FORMS.items():
            head, cfg, model, opt = build(exp, task, a.dataset, method, device)
            model.head.on_epoch_start(0, torch_generator(0, "index"))
            if target_q == "twice":
                score_twice(model)
            if lme == "twice":
                lme_twice(model)
            runs[form] = (model, opt, torch_generator(0, "loss"), cfg, step_with(clips()[clip], gathers()[gather]))
        batches = list(itertools.islice(task.train_batches(int(cfg["batch_size"]), torch_generator(0, "batches")),
                                        a.rounds + 2))
        batches = (batches[: -(-len(batches) // a.visits)] * a.visits)[: len(batches)]  # each seen `visits` times
        case = f"{exp['paper']}/{exp['artifact']} {a.dataset} {method}"
        if cfg.get("grad_clip"):
            alone = clip_alone(runs[REGISTERED][0], batches[0], float(cfg["grad_clip"]), a.rounds)
            out += [{"part": "clip alone", "case": f"{case} ({alone['mib']:.0f} MiB of gradients)", "form": f"clip {f}",
                     "ms": 1e3 * alone[f], "x kept": alone[f] / alone["two buffers"], "identical": None}
                    for f in clips()]
        if getattr(runs[REGISTERED][0].head, "rule", None) is not None and runs[REGISTERED][0].head.rule.uses_nu:
            alone = lme_alone(runs[REGISTERED][0], batches[0], a.rounds)
            out += [{"part": "head loss and backward", "case": case, "form": f"nu lme {f}", "ms": 1e3 * alone[f],
                     "x kept": alone[f] / alone["twice"], "identical": None} for f in alone]
        times = steps_in_turn(runs, batches)
        ref = statistics.median(times["kept"])
        out += [{"part": "train step", "case": f"{case} (clip {cfg.get('grad_clip')}, correct: "
                 f"{head.get('params', {}).get('correct', '-')})", "form": f, "ms": 1e3 * statistics.median(ts),
                 "x kept": statistics.median(ts) / ref, "identical": same_weights(runs[f][0], runs["kept"][0])}
                for f, ts in times.items()]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", required=True), p.add_argument("--scale", default="paper")
    p.add_argument("--dataset", required=True), p.add_argument("--processed", required=True)
    p.add_argument("--features"), p.add_argument("--methods", nargs="*")
    p.add_argument("--rounds", type=int, default=20), p.add_argument("--threads", type=int, default=1)
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--visits", type=int, default=1, help="the steps cycle over 1/visits of the batches: per-example "
                   "state (SCENT's nu, set at a first visit) is then updated and read back; 3 visits reach the nu a rule "
                   "whose loss reads the nu before its update wrote")
    p.add_argument("--out-dir", default=OUT), p.add_argument("--name", default="step_forms")
    a = p.parse_args()
    configure_process(a.threads)  # torch's threads and the allocator as `xcbench train` sets them
    rows = measure(a)
    where = f"{platform.processor() or platform.machine()}, {a.threads} thread(s), {os.cpu_count()} cores"
    md = [f"# One training step in the forms the package computed it in ({where})", "",
          "| part | case | form | ms | x kept | identical to kept |", "|---|---|---|---|---|---|"]
    md += [f"| {r['part']} | {r['case']} | {r['form']} | {r['ms']:.1f} | {r['x kept']:.2f} | "
           f"{'-' if r['identical'] is None else r['identical']} |" for r in rows]
    forms = "; ".join(f"{f}: clip {c}, target q {q}, gather {g}, nu lme {n}" for f, (c, q, g, n) in FORMS.items())
    md += ["", f"Forms ({forms}): benchmarks/step_forms.py's docstring. Median of {a.rounds} rounds after two warm-up "
           "rounds; in each round every form runs in turn (the same load for all). identical: every weight after the "
           "timed steps equals the kept form's (the kept runs were trained with it), bit for bit; torch's float32 "
           f"clip rounds differently. {a.note}"]
    for path in write_outputs(a.name, {"where": where, "note": a.note, "forms": FORMS, "rows": rows},
                              "\n".join(md), a.out_dir):
        print("wrote", path)


if __name__ == "__main__":
    main()
