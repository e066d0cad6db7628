"""pytest-benchmark suites for the simulator (run with ``make bench``).

Not collected by a plain ``pytest`` run (``testpaths = ["tests"]``).  The
30 s dense benchmark is marked ``slow``, so ``pytest benchmarks`` (default
addopts ``-m 'not slow ...'``) runs only the quick ones, while ``make bench``
(``-o addopts=''``) runs them all.
"""
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
