"""The run-spec layer: precedence a newcomer can predict, and every formerly silent config mistake an error."""

import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from xcbench.checks import check_experiment, check_repository
from xcbench.config import ConfigError, load_experiment, resolve_experiment
from xcbench.io import write_yaml

BASE = {"paper": "p", "title": "t", "task": {"name": "xmc", "params": {}}, "datasets": ["a", "b"], "seeds": [0],
        "render": {"kind": "table", "renderer": "metric_table"}, "train": {"epochs": 1, "batch_size": 4, "lr": 0.1},
        "methods": {"m": {"head": "sampled_softmax", "params": {"sampler": "uniform", "m": 5}}}}


def _write(tmp_path, name, exp):
    write_yaml(tmp_path / f"{name}.yaml", {"artifact": name, **exp})
    return tmp_path / f"{name}.yaml"


def test_child_base_setting_beats_the_parents_scale_block(tmp_path):
    """extends: parent < parent's scale < child < child's scale (the child's own features win at tiny)."""
    _write(tmp_path, "parent", {**BASE, "features": {"extractor": "tfidf_svd", "dim": 64},
                                "scales": {"tiny": {"features": {"extractor": "tfidf_svd", "dim": 8}}}})
    child = _write(tmp_path, "child", {"paper": "p", "title": "c", "extends": "parent",
                                       "features": {"extractor": "label_svd", "dim": 16}})
    assert resolve_experiment(load_experiment(child), "tiny")["features"] == {"extractor": "label_svd", "dim": 16}
    assert resolve_experiment(load_experiment(tmp_path / "parent.yaml"), "tiny")["features"]["dim"] == 8


def test_child_notes_replace_the_parents_once_at_every_scale(tmp_path):
    """A variant's caption notes appear once (they were copied into the parent's scale blocks and then
    appended to themselves), replace the parent's at every scale, and its own scale notes still add."""
    _write(tmp_path, "parent", {**BASE, "notes": "parent text.", "scales": {"paper": {"notes": "parent paper text."},
                                                                           "quick": {"notes": "parent quick text."}}})
    child = _write(tmp_path, "child", {"paper": "p", "title": "c", "extends": "parent", "notes": "child text.",
                                       "scales": {"quick": {"notes": "child quick text."}}})
    exp = load_experiment(child)
    assert resolve_experiment(exp, "paper")["notes"] == "child text."
    assert resolve_experiment(exp, "quick")["notes"] == "child text. child quick text."
    assert resolve_experiment(load_experiment(tmp_path / "parent.yaml"), "paper")["notes"] == "parent text. parent paper text."


def test_view_narrows_datasets_at_every_scale(tmp_path):
    _write(tmp_path, "owner", {**BASE, "scales": {"quick": {"datasets": ["a", "b"]}}})
    view = _write(tmp_path, "view", {"paper": "p", "title": "v", "runs_of": "owner", "datasets": ["a"],
                                     "render": {"kind": "figure", "renderer": "curves"}})
    assert resolve_experiment(load_experiment(view), "quick")["datasets"] == ["a"]


def test_typo_in_a_scale_method_is_an_error_not_a_new_run(tmp_path):
    methods = {"lstm_rff": {"head": "sampled_softmax", "params": {"sampler": "rff"}}}
    f = _write(tmp_path, "t", {**BASE, "methods": methods, "scales": {"quick": {"methods": {"lstm_rf": {"params": {"m": 3}}}}}})
    with pytest.raises(ConfigError, match=r"scales.quick.methods.lstm_rf: no method 'lstm_rf'.*did you mean lstm_rff"):
        resolve_experiment(load_experiment(f), "quick")


@pytest.mark.parametrize("method,match", [
    ({"head": "sampled_softmax", "params": {"samplr": "uniform"}}, r"methods.m.params.samplr: .*did you mean sampler"),
    ({"head": "sampled_softmax", "params": {"sampler": "midx_rq", "sampler_params": {"k": 8}}},
     r"params.sampler_params.k: not a parameter of sampler 'midx_rq'.*did you mean K"),
    ({"head": "sampled_softmax", "params": {"sampler": "uniforn"}}, r"unknown sampler 'uniforn'"),
    ({"head": "sampled_softmax", "model": {"tie_embedding": True}}, r"model.tie_embedding: unknown model key"),
    ({"head": "sampled_softmax", "model": {"encoder": {"name": "mlp", "hiden": 8}}}, r"hiden: not a parameter of encoder"),
    ({"head": "softmax_full"}, r"unknown head 'softmax_full'"),
])
def test_misspelt_names_and_params_fail_when_the_dag_is_built(tmp_path, method, match):
    f = _write(tmp_path, "t", {**BASE, "methods": {"m": method}})
    with pytest.raises(ConfigError, match=match):
        check_experiment(resolve_experiment(load_experiment(f), "quick"), str(f))


def _repo_copy(tmp_path):
    for d in ("experiments", "claims"):
        shutil.copytree(REPO / "config" / d, tmp_path / d)
    return tmp_path / "experiments", tmp_path / "claims"


def test_xcbench_check_passes_on_the_repository():
    r = subprocess.run([sys.executable, "-m", "xcbench", "check"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_xcbench_check_finds_methods_run_nowhere_stale_views_and_claims(tmp_path):
    exps, claims = _repo_copy(tmp_path)
    f = exps / "midx" / "fig7a.yaml"  # tiny and quick skip rq_m10 already; now paper does too
    f.write_text(f.read_text().replace("scales:\n", "scales:\n  paper: {skip: [rq_m10]}\n", 1))
    v = exps / "midx" / "fig5.yaml"
    v.write_text(v.read_text().replace("datasets: [ptb]", "datasets: [ptb, wikitext-3]"))
    c = claims / "midx.yaml"
    c.write_text(c.read_text().replace("right: {method: lstm_midx_pq, metric: ppl}", "right: {method: lstm_midx_pqq, metric: ppl}", 1))
    errs = "\n".join(check_repository(exps, claims))
    assert "method 'rq_m10' runs at no scale" in errs
    assert "does not run" in errs and "wikitext-3" in errs
    assert "method 'lstm_midx_pqq' is not a run of table4" in errs


def test_xcbench_check_finds_requires_naming_no_setup_check_of_the_artifact(tmp_path):
    exps, claims = _repo_copy(tmp_path)
    c = claims / "midx.yaml"
    text = c.read_text()
    assert "requires: [seqrec_gru_trains_as_in_the_paper]" in text
    assert check_repository(exps, claims) == []
    c.write_text(text.replace("requires: [seqrec_gru_trains_as_in_the_paper]", "requires: [seqrec_gru_trains]", 1))
    assert "requires 'seqrec_gru_trains', which is not a setup check" in "\n".join(check_repository(exps, claims))
    c.write_text(text.replace("requires: [seqrec_gru_trains_as_in_the_paper]", "requires: [seqrec_gru_midx_rq_above_static_recall50]", 1))
    assert "which is not a setup check" in "\n".join(check_repository(exps, claims))  # a claim, not a check
    j = text.index("artifact: table7", text.index("  - id: seqrec_gru_trains_as_in_the_paper"))
    c.write_text(text[:j] + "artifact: table4" + text[j + len("artifact: table7"):])  # the check moves to table4
    errs = "\n".join(check_repository(exps, claims))
    assert "requires 'seqrec_gru_trains_as_in_the_paper' of artifact 'table4', not its own 'table7'" in errs


def test_explain_names_the_file_and_line_of_every_setting(tmp_path):
    from xcbench.explain import explain
    (tmp_path / "parent.yaml").write_text(
        "paper: p\nartifact: parent\ntitle: t\ntask: {name: xmc, params: {}}\ndatasets: [a, b]\nseeds: [0]\n"
        "render: {kind: table, renderer: metric_table}\n"
        "train: {epochs: 1, batch_size: 4, lr: 0.1}\n"
        "methods:\n  m: {head: sampled_softmax, params: {m: 5}}\n"
        "scales:\n  quick:\n    train: {lr: 0.2}\n")
    (tmp_path / "child.yaml").write_text(
        "paper: p\nartifact: child\ntitle: c\nextends: parent\n"
        "per_dataset:\n  b: {train: {batch_size: 8}}\n")
    out = explain(tmp_path / "child.yaml", "quick", "b", "m")
    assert f"train.lr = 0.2    # {tmp_path / 'parent.yaml'}:13 (scales.quick.train.lr)" in out
    assert f"train.batch_size = 8    # {tmp_path / 'child.yaml'}:6 (per_dataset.b.train.batch_size)" in out
    assert f"head_params.m = 5    # {tmp_path / 'parent.yaml'}:10 (methods.m.params.m)" in out
    assert "train.epochs = 1    # " + str(tmp_path / "parent.yaml") + ":8 (train.epochs)" in out


def test_a_scale_skips_methods_by_name_or_pattern_and_runs_every_other(tmp_path):
    methods = {f"{s}_m{m}": {"head": "sampled_softmax", "params": {"sampler": s, "m": m}}
               for s in ("uniform", "unigram") for m in (5, 20)}
    f = _write(tmp_path, "t", {**BASE, "methods": methods, "scales": {"quick": {"skip": ["*_m20", "unigram_m5"]}}})
    assert list(resolve_experiment(load_experiment(f), "quick")["methods"]) == ["uniform_m5"]
    assert len(resolve_experiment(load_experiment(f), "paper")["methods"]) == 4  # a new method runs by default
    f = _write(tmp_path, "t", {**BASE, "methods": methods, "scales": {"quick": {"skip": ["lsh_*"]}}})
    with pytest.raises(ConfigError, match=r"skip names \['lsh_\*'\], which match none"):
        resolve_experiment(load_experiment(f), "quick")


def test_check_and_explain_do_not_depend_on_installed_libraries(monkeypatch):
    """`xcbench check` reads the files: a method whose optional library is missing still runs at some scale
    (fig2's annoy runs), and `explain` still shows its settings."""
    from conftest import REPO

    from xcbench import registry
    from xcbench.explain import explain

    monkeypatch.setattr(registry, "unavailable", lambda methods: {m: "needs a library" for m in methods})
    assert check_repository(REPO / "config" / "experiments", REPO / "config" / "claims") == []
    assert "selector_params.metric = 'angular'" in explain(REPO / "config/experiments/class_selection/fig2.yaml",
                                                           "paper", "synthetic-faces-87k", "annoy_1")


def test_a_nan_or_infinite_number_is_an_error_naming_file_and_line(tmp_path):
    f = _write(tmp_path, "t", BASE)
    f.write_text(f.read_text().replace("lr: 0.1", "lr: .nan"))
    line = next(i for i, ln in enumerate(f.read_text().splitlines(), 1) if ".nan" in ln)
    with pytest.raises(ConfigError, match=rf"t.yaml:{line}: train/lr: nan is not a finite number"):
        load_experiment(f)
    f.write_text(f.read_text().replace("lr: .nan", "lr: -.inf"))
    with pytest.raises(ConfigError, match="not a finite number"):
        load_experiment(f)


def test_a_misspelt_parameter_is_reported_at_the_file_and_line_that_hold_it(tmp_path):
    """A typo in the file a variant `extends` (or a view shows) names that file and line, not the variant's."""
    methods = {"m": {"head": "sampled_softmax", "params": {"sampler": "uniform", "m": 5, "samplr_params": {}}}}
    parent = _write(tmp_path, "parent", {**BASE, "methods": methods})
    child = _write(tmp_path, "child", {"paper": "p", "title": "c", "extends": "parent", "seeds": [1]})
    line = next(i for i, ln in enumerate(parent.read_text().splitlines(), 1) if "samplr_params" in ln)
    with pytest.raises(ConfigError, match=rf"parent.yaml:{line}: methods.m.params.samplr_params: not a parameter"):
        check_experiment(resolve_experiment(load_experiment(child), "quick"), str(child))
    over = _write(tmp_path, "over", {**BASE, "per_dataset": {"b": {"train": {"optimizer": "adamm"}}}})
    line = next(i for i, ln in enumerate(over.read_text().splitlines(), 1) if "adamm" in ln)
    with pytest.raises(ConfigError, match=rf"over.yaml:{line}: methods.m.train.optimizer: unknown optimizer"):
        check_experiment(resolve_experiment(load_experiment(over), "quick"), str(over))


def test_the_precedence_is_written_once_for_the_resolver_and_explain(tmp_path, monkeypatch):
    """runspec.PRECEDENCE orders the merge (method_config) and explain's lookup: the same lr set at all four levels
    resolves to the method's per_dataset value and explain names its line; reversing the table reverses both."""
    from xcbench import runspec
    from xcbench.explain import explain
    from xcbench.runspec import method_config

    f = _write(tmp_path, "t", {**BASE, "train": {**BASE["train"], "lr": 0.1},
                               "methods": {"m": {**BASE["methods"]["m"], "train": {"lr": 0.3}}},
                               "per_dataset": {"a": {"train": {"lr": 0.2}, "methods": {"m": {"train": {"lr": 0.4}}}}}})
    line = {v: i for i, ln in enumerate(f.read_text().splitlines(), 1) for v in (0.1, 0.2, 0.3, 0.4) if f"lr: {v}" in ln}
    exp = resolve_experiment(load_experiment(f), "quick")
    assert method_config(exp, "a", "m")[1]["lr"] == 0.4 and method_config(exp, "b", "m")[1]["lr"] == 0.3
    assert f"train.lr = 0.4    # {f}:{line[0.4]} " in explain(f, "quick", "a", "m")
    monkeypatch.setitem(runspec.PRECEDENCE, "train", runspec.PRECEDENCE["train"][::-1])
    assert method_config(exp, "a", "m")[1]["lr"] == 0.1
    assert f"{f}:{line[0.1]} (train.lr)" in explain(f, "quick", "a", "m")
