"""``python -m tensorsketch.canvas``: print a file's graph IR, or ``--holes [paths]``."""

import sys

from tensorsketch.canvas._cli import main

if __name__ == "__main__":
    sys.exit(main())
