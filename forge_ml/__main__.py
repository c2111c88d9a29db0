"""`python -m forge_ml ...` runs the CLI, for environments without the `forge-ml` script on PATH."""

import sys

from forge_ml.cli import main

sys.exit(main())
