"""``python -m gateway``: the same as ``ttsfarm gateway``."""

import sys

from gateway.app import main

sys.exit(main())
