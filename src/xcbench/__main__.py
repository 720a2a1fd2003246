"""`python -m xcbench ...`: the command-line entry point used by every Snakemake rule. A train job goes to a
warm fork server where XCBENCH_FORKSERVER=1 (forkserver.py); everything else runs here."""

import sys

from xcbench.forkserver import served

if __name__ == "__main__":
    rc = served(sys.argv[1:])
    if rc is None:
        from xcbench.cli import main

        rc = main()
    raise SystemExit(rc)
