"""``python -m books``: the same as ``ttsfarm book``."""

import sys

from books.cli import main

sys.exit(main())
