"""The package installs as a wheel: schemas, the dataset catalogue and the figure style ship inside it,
and nothing in the core imports Snakemake or matplotlib."""

import subprocess
import sys
import zipfile

import pytest
from conftest import REPO


@pytest.mark.slow
def test_wheel_carries_its_data_files(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "No module named" in r.stderr:
        pytest.skip(f"cannot build a wheel here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("xcbench-*.whl"))).namelist()
    for f in ("xcbench/datasets.yaml", "xcbench/schemas/experiment.schema.yaml", "xcbench/schemas/config.schema.yaml",
              "xcbench/reporting/paper.mplstyle", "xcbench/cli.py"):
        assert f in names, f


def test_core_needs_neither_snakemake_nor_matplotlib():
    code = ("import sys\nfrom xcbench.registry import FAMILIES\n[r.names() for r in FAMILIES.values()]\n"
            "from xcbench import train, cli, catalogue\ncatalogue.load_datasets()\n"
            "assert 'snakemake' not in sys.modules and 'matplotlib' not in sys.modules, "
            "[m for m in sys.modules if m.startswith(('snakemake', 'matplotlib'))]\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_ruff_is_clean():
    """The linter configured in pyproject.toml ([tool.ruff]) passes on src/, tests/, benchmarks/ and studies/."""
    import shutil
    import subprocess

    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    r = subprocess.run([ruff, "check", "src", "tests", "benchmarks", "studies"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]
