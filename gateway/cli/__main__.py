"""``python -m gateway.cli``: the ``foldgate`` command from a checkout, without the console script."""

import sys

from gateway.cli import main

sys.exit(main())
