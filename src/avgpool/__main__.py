"""``python -m avgpool``: the command line, as the ``avgpool`` console script runs it.

avgpool.cli imports nothing heavy: main() handles Ctrl-C before numpy, numba or the rest of
avgpool's modules are loaded (those that the package itself has not loaded already).
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
