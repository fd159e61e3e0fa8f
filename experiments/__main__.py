"""`python -m experiments`: the same as the `quotalab` command."""

import sys

from experiments.cli import main

sys.exit(main())
