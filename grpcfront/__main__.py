"""``python -m grpcfront``: the same as ``ttsfarm grpc``."""

import sys

from grpcfront.server import main

sys.exit(main())
