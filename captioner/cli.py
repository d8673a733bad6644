"""``captioner``: the command line. Nouns are groups, verbs their commands; docstrings are the help.

Each noun lives in ``captioner/commands/<noun>.py`` and is imported only when it is invoked, so that
``captioner --help`` stays instant and a missing optional dependency only breaks the command that needs it.
"""
from __future__ import annotations

import importlib
import sys

import click

from captioner.errors import CaptionerError

# command name -> (module, attribute, one-line help shown in `captioner --help`)
COMMANDS = {
    "embed": ("captioner.commands.embed", "cli", "Encode a dataset split into the embedding cache."),
    "encoders": ("captioner.commands.embed", "encoders_cli", "List the registered encoders."),
    "align": ("captioner.commands.align_diagnose", "cli", "Fit, score and benchmark rotations between encoders."),
    "caption": ("captioner.commands.caption", "caption_cli", "Caption image files."),
    "classify": ("captioner.commands.caption", "classify_cli", "Classify image files zero-shot."),
    "eval": ("captioner.commands.evaluate", "cli", "Evaluate captions (COCO metrics) and zero-shot accuracy."),
    "report": ("captioner.commands.evaluate", "report_cli", "Write the results table (Markdown + JSON)."),
    "train": ("captioner.commands.train", "cli", "Train a text JEPA, a next-token baseline or an image JEPA."),
    "scaling": ("captioner.commands.scaling", "scaling_cli", "Fit the alignment scaling law over runs."),
    "world": ("captioner.commands.world", "cli", "Train the JEPA world's encoders and report its pair-free chain."),
    "scenelab": ("captioner.commands.scenelab", "scenelab_cli", "Check the theorem in a controlled world."),
    "demo": ("captioner.commands.demo", "cli", "Start the Gradio demo on 127.0.0.1."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pairfree-captioner")
def cli():
    """Pair-free cross-modal captioner: align separately trained image and text encoders by one
    rotation, then caption images and classify them zero-shot.

    State (embedding caches, rotations, checkpoints) lives under $CAPTIONER_HOME
    (default ~/.cache/captioner)."""


def main(argv=None):
    from captioner.threads import configure

    try:
        configure()  # thread counts and spinning, before any command imports torch
        return cli.main(args=argv, prog_name="captioner", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except CaptionerError as e:
        click.echo(f"error: {e}", err=True)
        from captioner.distributed import exit_launched

        exit_launched(2)
        sys.exit(2)


if __name__ == "__main__":
    main()
