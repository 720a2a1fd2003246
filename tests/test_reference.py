"""docs/methods.md is exactly `xcbench list -v`: the parameter reference never drifts from the code."""

import subprocess
import sys

from conftest import REPO


def test_methods_reference_is_in_sync_with_the_registries():
    r = subprocess.run([sys.executable, "-m", "xcbench", "list", "-v"], capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert (REPO / "docs" / "methods.md").read_text() == r.stdout, \
        "docs/methods.md is stale: regenerate it with `python -m xcbench list -v > docs/methods.md`"


def test_methods_reference_lists_settings_not_call_arguments():
    """A head taking its settings through **kwargs (the sparse heads, via SparseOvA) lists its parents'; functions
    the code calls (losses, readers, estimators) list no 'parameters' (their arguments are not settings)."""
    from xcbench.reference import methods_reference

    rows = {ln.split("|")[1].strip(" `"): ln.split("|")[2] for ln in methods_reference().splitlines() if ln.startswith("| `")}
    assert "`fan_in` = 32" in rows["uniform_sparse"] and "`rewire_interval`" in rows["unstructured_sparse"]
    assert rows["sq_hinge"].strip() == "–" and rows["xc_bow"].strip() == "–"
