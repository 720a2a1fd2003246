"""xcbench: reproducing five papers on training classifiers with huge output layers.

Layout and interfaces are described in docs/design.md and README.md. Every method is a
registered class; the registry key is the identifier used in YAML, result paths and tables.
"""

__version__ = "0.1.0"
