"""`python -m xcbench ...`: the command-line entry point used by every Snakemake rule. Where
XCBENCH_FORKSERVER=1, a train, render, claims or report job goes to a warm fork server (forkserver.py);
everything else, and any job no server takes, runs here."""

import sys

from xcbench.forkserver import served

if __name__ == "__main__":
    rc = served(sys.argv[1:])
    if rc is None:
        from xcbench.cli import main

        rc = main()
    raise SystemExit(rc)
