"""Caption and footer text for every table and figure: title, scale, data substitutions, seeds, and
the setup of the runs shown, every number read from the runs' resolved configuration
as each run recorded it in its config.resolved.yaml (a kept tree re-renders with the settings its runs had;
a run without one falls back to `runspec.method_config` of today's file), never restated by hand; runs cut
short, stopped early, or still improving when their epochs ran out (a stop rule that could have ended them did
not) are named. A setting shared by every run is stated once; one that differs is stated per group of runs
("Delicious: ...", "Dense + intermediate: ..."). Fixed features are stated only for datasets whose
raw samples are not feature vectors (FEATURE_FORMATS): dense datasets (synthetic faces) use their
own vectors. Free-text `notes:` explain; they should not restate settings.
"""

from __future__ import annotations

from xcbench.reporting.labels import caption_name, pretty
from xcbench.reporting.stop_rule import stop_window, stopped_early_at
from xcbench.run import expected_runs
from xcbench.runspec import encoder_config
from xcbench.schedules import plateau_settings

FEATURE_FORMATS = {"xc_bow"}  # raw formats whose samples go through the experiment's feature extractor


def substitutions(exp: dict, catalogue: dict) -> list[str]:
    notes = []
    for d in exp["datasets"]:
        entry = catalogue.get(d, {})
        if entry.get("stands_in_for"):
            notes.append(f"{pretty(d)} stands in for {', '.join(entry['stands_in_for'])}"
                         + (f" ({entry['note']})" if entry.get("note") else ""))
    return notes


def _features(exp: dict, dataset: str, catalogue: dict) -> str:
    f = exp.get("features")
    if not f or catalogue.get(dataset, {}).get("format", "xc_bow") not in FEATURE_FORMATS:
        return ""
    return f"{f['extractor']} features (d = {f.get('dim', 512)})"


def _encoder(model_cfg: dict) -> str:
    enc = encoder_config(model_cfg)
    name = enc.pop("name")
    if name == "identity" and not enc:
        return "no encoder (linear in the features)"
    tie = ", input and class embeddings tied" if model_cfg.get("tie_embeddings") else ""
    return f"encoder {name}" + (f" ({', '.join(f'{k} {v}' for k, v in enc.items())}{tie})" if enc or tie else "")


def _schedule(t: dict) -> str:
    """The lr schedule; a plateau schedule with its settings (the class defaults where unset)."""
    p = plateau_settings(t)
    if p is None:
        return f"{t.get('schedule', 'constant')} schedule"
    return (f"lr x{p['factor']} after {p['patience']} epochs without a {p['min_delta']} gain in validation "
            f"{p['metric']} (not below {p['min_lr']}), stop after {p['stop_patience']} such epochs")


def _train(t: dict, lr: bool = True) -> str:
    rate = f" lr {t.get('lr')}" if lr else ""
    s = f"{t.get('optimizer', 'adam')}{rate}, {_schedule(t)}, {t.get('epochs')} epochs, batch {t.get('batch_size')}"
    if t.get("grad_clip"):
        s += f", gradient norm clipped to {t['grad_clip']}"
    if t.get("select"):
        sel = t["select"]
        s += (f", test at the best epoch by validation {sel['metric']} ({sel.get('mode', 'max')}"
              + (f", patience {sel['patience']}" if sel.get("patience") else "") + ")")
    return s


def _shared_params(specs: list[dict]) -> str:
    """Head params with one value in every run (e.g. the softmax temperature tau)."""
    shared = {k: v for k, v in specs[0].items() if not isinstance(v, dict) and all(s.get(k) == v for s in specs)} \
        if specs and len(specs) > 1 else {}
    return ("head params of every method: " + ", ".join(f"{k} {v}" for k, v in shared.items())) if shared else ""


def _grouped(values: dict[tuple[str, str], str], exp: dict) -> str:
    """One setting over runs (dataset, method): once if shared, else per dataset or per method."""
    distinct = list(dict.fromkeys(values.values()))
    if len(distinct) == 1:
        return distinct[0]
    for axis in (0, 1):
        by = {}
        for k, v in values.items():
            by.setdefault(k[axis], set()).add(v)
        if all(len(s) == 1 for s in by.values()):
            name = pretty if axis == 0 else (lambda m: caption_name(exp, m))
            groups: dict[str, list[str]] = {}
            for key, s in by.items():
                groups.setdefault(next(iter(s)), []).append(name(key))
            return "; ".join(f"{', '.join(keys)}: {v}" for v, keys in groups.items() if v)
    return "; ".join(f"{pretty(d)} / {caption_name(exp, m)}: {v}" for (d, m), v in values.items() if v)


def _run_configs(exp: dict, runs: list[tuple[str, str]], recs: list[dict] | None) -> dict:
    """(spec, train, model) of each shown run: the settings it was trained with, read from its
    config.resolved.yaml (collect attaches it), else those today's experiment file resolves to."""
    from xcbench.runspec import method_config

    own = {(r["dataset"], r["method"]): r["resolved"] for r in recs or [] if r.get("resolved")}
    out = {}
    for r in runs:
        res = own.get(r)
        out[r] = (({"head": res["head"], "params": res.get("head_params", {})}, res.get("train", {}), res.get("model", {}))
                  if res else method_config(exp, *r))
    return out


def run_status(exp: dict, recs: list[dict] | None) -> str:
    """Which shown runs were cut short (a time limit), stopped early (no improvement), still improving when
    their epochs ran out (a stop rule that could have ended them did not) or trained with settings other than
    today's (`drift`), if any; the seeds of a method cut at the same point are one entry, "(seeds 0, 1)"."""
    cut, stopped, drifted, running = {}, {}, {}, {}
    for r in recs or []:
        who = caption_name(exp, r["method"]) + (f" ({pretty(r['dataset'])})" if len(exp["datasets"]) > 1 else "")
        if r.get("drift"):  # a kept run whose settings today's file has changed (reporting/drift.py)
            drifted.setdefault(f"{who} ({', '.join(d.split(':')[0] for d in r['drift'])})", []).append(r.get("seed"))
        train = (r.get("resolved") or {}).get("train", {})
        planned = train.get("epochs")
        if r.get("cut_short_after_epoch"):
            e = r["cut_short_after_epoch"]  # fractional when cut inside an epoch (a checkpoint there)
            at = f"epoch {e}" if e == int(e) else f"{e - int(e):.0%} of epoch {int(e) + 1}"
            cut.setdefault(f"{who} after {at}" + (f" of {planned}" if planned else ""), []).append(r.get("seed"))
        elif r.get("trained_past_rule"):  # an older, longer patience trained on: read where today's rule stops
            stopped.setdefault(f"{who} at epoch {r['epochs']} (trained to {r['trained_past_rule']} under a longer "
                               "stop patience, read here)", []).append(r.get("seed"))
        elif planned and stopped_early_at(r, planned):
            stopped.setdefault(f"{who} at epoch {r['epochs']} of {planned}", []).append(r.get("seed"))
        elif planned and r.get("epochs") == planned and stop_window(train):
            running.setdefault(f"{who}, best epoch {r.get('best_epoch', planned)} of {planned}", []).append(r.get("seed"))
    many = len(exp.get("seeds", [])) > 1

    def entries(found: dict) -> str:
        return ", ".join(k + (f" (seed{'s' * (len(v) > 1)} {', '.join(map(str, v))})" if many else "")
                         for k, v in found.items())
    parts = ([f"Cut short by the time limit (tested at the best epoch so far): {entries(cut)}."] if cut else []) + \
        ([f"Stopped early (no validation improvement): {entries(stopped)}."] if stopped else []) + \
        ([f"Still improving when their epochs ran out (the stop rule never ended them; more epochs may move their "
          f"numbers): {entries(running)}."] if running else []) + \
        ([f"Trained with settings other than today's experiment file (kept runs; rerun them to update): "
          f"{entries(drifted)}."] if drifted else [])
    return " ".join(parts)


def machines(exp: dict, recs: list[dict] | None) -> str:
    """Where the shown runs ran (each run's recorded CPU model and threads, or GPU): one machine named once;
    several: the machine of most runs named once, then the runs of each other machine (a kept tree mixing a lent
    GPU's runs, or a few reruns on another CPU, with the rest)."""
    by: dict[str, dict[str, list]] = {}
    for r in recs or []:
        name = str(r.get("device_name") or r.get("device") or "unrecorded").replace("(1 threads)", "(1 thread)")
        who = caption_name(exp, r["method"]) + (f" ({pretty(r['dataset'])})" if len(exp["datasets"]) > 1 else "")
        by.setdefault(name, {}).setdefault(who, []).append(r.get("seed"))
    if not by:
        return ""
    count = lambda name: sum(map(len, by[name].values()))  # noqa: E731
    main = max(sorted(by), key=count)  # the most runs; a tie: the first name
    if len(by) == 1:
        return f"Ran on {main}."
    many = len(exp.get("seeds", [])) > 1

    def runs(found: dict) -> str:
        sep = "; " if any("," in k for k in found) else ", "  # grid points read "NCE, lr 0.001"
        return sep.join(k + (f" (seed{'s' * (len(v) > 1)} {', '.join(map(str, sorted(v, key=str)))})" if many else "")
                        for k, v in found.items())
    rest = [f"{runs(by[name])} on {name}" for name in sorted(by) if name != main]
    return f"Ran on {main}, except " + "; and ".join(rest) + "."


def _trains(exp: dict, runs: list[tuple[str, str]], recs: list[dict] | None, cfg: dict) -> bool:
    """Whether the shown runs trained (a probe measures: no encoder or optimizer to state). When every
    run recorded its settings, from them (records.resolved_config writes a probe's `train` as {}), so a
    caption needs no torch; else from the task class, which imports the tasks."""
    recorded = {(r["dataset"], r["method"]) for r in recs or [] if r.get("resolved")}
    if runs and all(r in recorded for r in runs):
        return any(cfg[r][1] for r in runs)
    from xcbench.registry import TASKS

    return TASKS.get(exp["task"]["name"]).trains


def _train_setup(exp: dict, runs: list[tuple[str, str]], cfg: dict) -> str:
    """The runs' training settings; where they differ in the learning rate alone (a table whose heads run at
    their tuned lr, an lr grid), the shared part once and the lr per method, or the grid's values."""
    trains = {r: cfg[r][1] for r in runs}
    if len({_train(t, lr=False) for t in trains.values()}) != 1 or len({t.get("lr") for t in trains.values()}) == 1:
        return _grouped({r: _train(t) for r, t in trains.items()}, exp)
    shared = _train(next(iter(trains.values())), lr=False)
    if all("grid_of" in exp["methods"][m] for _, m in runs):
        return f"{shared}; lr: each run one of the grid's " + ", ".join(f"{v:g}" for v in sorted({t['lr'] for t in trains.values()}))
    return f"{shared}; lr by method: " + _grouped({r: f"{t['lr']:g}" for r, t in trains.items()}, exp)


def setup(exp: dict, catalogue: dict | None = None, recs: list[dict] | None = None) -> str:
    """The setup of every shown run, from the settings it ran with (its config.resolved.yaml)."""
    catalogue = catalogue or {}
    runs = list(dict.fromkeys((d, m) for d, m, _ in expected_runs(exp)))
    cfg = _run_configs(exp, runs, recs)
    trains = _trains(exp, runs, recs, cfg)
    parts = [_grouped({r: _features(exp, r[0], catalogue) for r in runs}, exp),
             _grouped({r: _encoder(cfg[r][2]) for r in runs}, exp) if trains else "",
             _train_setup(exp, runs, cfg) if trains else "",
             _shared_params([spec.get("params", {}) for spec, _, _ in cfg.values()])]
    parts = [p for p in parts if p and p != "no encoder (linear in the features)"]
    return ("Setup: " + "; ".join(parts) + ".") if parts else ""


def seeds_text(exp: dict, recs: list[dict] | None) -> str:
    """The experiment's seeds, and the seeds of the shown runs where they are fewer (a kept tree holding part)."""
    text = f"Seeds: {', '.join(map(str, exp['seeds']))}"
    ran = sorted({r["seed"] for r in recs or [] if r.get("seed") is not None})
    if ran and set(ran) != set(exp["seeds"]):
        text += f" (runs shown: seed{'s' * (len(ran) > 1)} {', '.join(map(str, ran))})"
    return text + "."


def footer(exp: dict, catalogue: dict, recs: list[dict] | None = None) -> str:
    parts = [f"Scale: {exp['scale']}.", seeds_text(exp, recs), setup(exp, catalogue, recs),
             run_status(exp, recs), machines(exp, recs)]
    if exp.get("unavailable"):
        parts.append("Not run here: " + "; ".join(exp["unavailable"].values()) + ".")
    subs = substitutions(exp, catalogue)
    if subs:
        parts.append("Substitutions: " + "; ".join(subs) + ".")
    notes = exp.get("notes")
    if notes:  # today's text at the rendered scale: prose, not settings (those come from each run's record above)
        parts.append(notes.strip())
    if exp.get("view_notes"):  # a view's (runs_of) own text: what its columns mean
        parts.append(exp["view_notes"].strip())
    return " ".join(p for p in parts if p)
