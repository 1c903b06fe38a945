#!/usr/bin/env python3
"""Profile a training job for data stalls: see README.md, or run with --help."""

import sys

from dsanalyze.cli import harness_main

if __name__ == "__main__":
    sys.exit(harness_main(sys.argv[1:]))
