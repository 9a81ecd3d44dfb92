"""``python -m rollarc.cli``: the ``rollarc`` command."""

import sys

from rollarc.cli import main

sys.exit(main())
