"""``python -m tensorsketch.canvas FILE``: open it in the Studio (``--ir``: print its graph IR;
``--holes [paths]``: list holes; ``--export mermaid|svg``: print it)."""

import sys

from tensorsketch.canvas._cli import main

if __name__ == "__main__":
    sys.exit(main())
