"""``python -m eval <noun> <verb> ...``: the experiments' runner (``eval/cli.py``)."""
import sys

from eval.cli import main

rc = main()
sys.exit(rc if isinstance(rc, int) else 0)
