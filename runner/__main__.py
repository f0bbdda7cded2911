"""`python -m runner` runs the `exechost` CLI."""

import sys

from runner.cli import main

sys.exit(main())
