"""`python -m dsanalyze ...`: the same as the `dsanalyze` command."""

import sys

from dsanalyze.cli import main

if __name__ == "__main__":
    sys.exit(main())
