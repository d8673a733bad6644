"""``captioner``: the command line. Nouns are groups, verbs their commands; docstrings are the help.

Each noun lives in ``captioner/commands/<noun>.py`` and is imported only when it is invoked, so that
``captioner --help`` stays instant and a missing optional dependency only breaks the command that needs it.
The experiments (scaling, scene lab, the world's report, the results report, benchmarks) are not here: they
run from ``python -m eval`` (``eval/cli.py``).
"""
from __future__ import annotations

import click

from captioner.clikit import LazyGroup, run

# command name -> (module, attribute, one-line help shown in `captioner --help`)
COMMANDS = {
    "embed": ("captioner.commands.embed", "cli", "Encode a dataset split into the embedding cache."),
    "encoders": ("captioner.commands.embed", "encoders_cli", "List the registered encoders."),
    "align": ("captioner.commands.align_diagnose", "cli", "Fit, score and diagnose rotations between encoders."),
    "caption": ("captioner.commands.caption", "caption_cli", "Caption image files."),
    "classify": ("captioner.commands.caption", "classify_cli", "Classify image files zero-shot."),
    "eval": ("captioner.commands.evaluate", "cli", "Evaluate captions (COCO metrics) and zero-shot accuracy."),
    "train": ("captioner.commands.train", "cli", "Train a text JEPA, a next-token baseline or an image JEPA."),
    "world": ("captioner.commands.world", "cli", "Train the JEPA world's encoders and write renders of its scenes."),
    "demo": ("captioner.commands.demo", "cli", "Start the Gradio demo on 127.0.0.1."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pairfree-captioner")
def cli():
    """Pair-free cross-modal captioner: align separately trained image and text encoders by one
    rotation, then caption images and classify them zero-shot.

    State (embedding caches, rotations, checkpoints) lives under $CAPTIONER_HOME
    (default ~/.cache/captioner)."""


def main(argv=None):
    return run(cli, argv, "captioner")


if __name__ == "__main__":
    main()
