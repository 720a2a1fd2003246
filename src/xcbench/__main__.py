"""`python -m xcbench ...`: the command-line entry point used by every Snakemake rule."""

from xcbench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
