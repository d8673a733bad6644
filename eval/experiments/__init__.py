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


def held_out_captions(split: str) -> list[str]:
    """The Tux Paint captions a pipeline scoring ``split`` must hold in neither its bank nor its decoder
    corpus: test's, as the pipeline's default ``exclude``, and the scored split's own when it is another (the
    decoder corpus holds val's: ``captioner.bank.decoder_corpus``)."""
    from captioner.datasets import get_dataset

    held = get_dataset("tuxpaint", "test").captions()
    return held if split == "test" else held + get_dataset("tuxpaint", split).captions()


def seed_list(text: str) -> list[int]:
    """``--seeds 0,1,2`` -> [0, 1, 2] (an argparse ``type``: a bad list is a one-line usage error)."""
    import argparse

    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of seeds, e.g. 0,1,2") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more seeds >= 0, e.g. 0,1,2")
    return seeds


def run_or_exit(ap, fn, *args, **kw):
    """``fn(*args, **kw)``, with a ``CaptionerError`` (missing models, bad files) printed as one line and exit 2."""
    from captioner.errors import CaptionerError

    try:
        return fn(*args, **kw)
    except CaptionerError as e:
        ap.exit(2, f"error: {e}\n")
