"""``python -m producer.gateway``: the same as ``ttsfarm gateway``."""

import sys

from producer.gateway.app import main

sys.exit(main())
