"""`python -m cli ARGS` runs `colosim ARGS` (from a checkout, without the console script)."""
import sys

from cli.main import main

sys.exit(main())
