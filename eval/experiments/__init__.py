"""One-off experiments behind figures in docs/results: each is ``python -m eval.experiments.<name>`` and
prints JSON and a table. They drive the library (captioner/, alignment/, eval/); nothing outside this
package imports them (``emit`` here writes and prints their results)."""
from __future__ import annotations


def emit(res: dict, out: str | None, json_only: bool, table: str) -> None:
    """Write ``res`` as JSON to ``out`` (atomically, when given) and print it, followed by ``table`` unless
    ``json_only``."""
    import json

    blob = json.dumps(res, indent=2, default=float)
    if out:
        from captioner.paths import atomic_write_bytes

        atomic_write_bytes(out, (blob + "\n").encode())
    print(blob if json_only else blob + "\n\n" + table)
