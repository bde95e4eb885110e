"""Entry point: python3 -m todo COMMAND [ARGS]."""

import sys

from todo.cli import main

sys.exit(main(sys.argv[1:]))
