"""One-off experiments behind figures in docs/results: each is ``python -m eval experiment <name>`` (the
module ``eval/experiments/<name with _>.py``, its click command ``cli``) and prints JSON and a table. They
drive the library (captioner/, alignment/, eval/); nothing outside this package imports them (``emit`` here
writes and prints their results)."""
from __future__ import annotations

import click

from captioner.clikit import LazyGroup

# command name -> (module, attribute, one-line help); the module is imported only when the command runs
EXPERIMENTS = {
    "alignment-realdata": "Pair-free vs paired alignment on real encoders (Tux Paint).",
    "decode-input": "What the Tux Paint decoder should read, per rotation: projection or rotated query.",
    "decoder-seeds": "How much the decoder's Tux Paint CIDEr depends on its training seed.",
    "jepa-alignment": "Our text JEPA vs MiniLM-L6 vs SmolLM2 against a vision encoder on real data.",
    "lattice-prior": "The lattice matcher with estimated cards and caption priors that differ (synthetic lattices).",
    "matcher-ceiling": "Is the matcher-oracle gap the matcher's fault or the data's?",
    "matcher-repeat": "Interleaved timings of the pair-free matcher against a baseline copy.",
    "pairfree-identifiability": "Can an unpaired objective find the true rotation between real encoders?",
    "pairfree-margin": "Do the pair-free rotations beat the random floor by a clear margin?",
    "pairfree-seeds": "Head pseudo-pair seeds refined on unpaired data vs head and paired.",
    "world-decode-input": "What the world's decoder should read: the rotated render or the projection.",
    "world-disjoint": "Why the world's disjoint-scene setting defeats every pair-free matcher.",
    "world-ideal": "Would a larger world let a pair-free matcher align disjoint scenes? (ideal encoders)",
    "world-lattice-floor": "The lattice matcher's own null on the world.",
    "world-matchers": "The world's pair-free settings under each matcher.",
    "world-wide": "Can the attributes be estimated when the JEPAs embed wider than the world's lattice?",
    "world-prior": "The world's pair-free map when captions have a prior of their own and omit attributes.",
}


@click.group("experiment", cls=LazyGroup,
             lazy={name: (f"eval.experiments.{name.replace('-', '_')}", "cli", line)
                   for name, line in EXPERIMENTS.items()})
def cli():
    """One-off experiments behind figures in docs/results (each prints JSON and a table)."""


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


class SeedList(click.ParamType):
    """``--seeds 0,1,2`` -> [0, 1, 2]; a bad list is a one-line usage error."""

    name = "seeds"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            seeds = [int(x) for x in str(value).split(",") if x.strip()]
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of seeds, e.g. 0,1,2", param, ctx)
        if not seeds or min(seeds) < 0:
            self.fail(f"{value!r}: give one or more seeds >= 0, e.g. 0,1,2", param, ctx)
        return seeds


SEEDS = SeedList()
