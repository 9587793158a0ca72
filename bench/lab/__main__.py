"""``python -m bench.lab NAME [ARGS]``: run one of the lab's benches (``bench.lab.LAB``); ``--help`` lists them."""

from __future__ import annotations

import logging
import sys

from bench.cli import main as run_stage
from bench.lab import LAB


def main(argv: list[str] | None = None) -> int:
    # as `ttsfarm` configures it: other libraries' warnings; bench.cli lets the bench's own progress (INFO) through
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_stage(sys.argv[1:] if argv is None else argv, prog="python -m bench.lab", stages=LAB, default=None)


if __name__ == "__main__":
    raise SystemExit(main())
