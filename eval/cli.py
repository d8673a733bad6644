"""``python -m eval``: the one way to run an experiment. Nouns are groups, verbs their commands; docstrings
are the help; each command's module is imported only when it runs (``captioner.clikit.LazyGroup``, as the
product's ``captioner``).

The product never imports this package: ``captioner`` captions, classifies, aligns and evaluates
(``captioner eval coco|zeroshot``); everything here measures it (reports, studies, benchmarks, one-off
experiments behind docs/results).
"""
from __future__ import annotations

import click

from captioner.clikit import LazyGroup, run

# command name -> (module, attribute, one-line help shown in `python -m eval --help`)
COMMANDS = {
    "report": ("eval.commands.report", "cli", "Write the results table on Tux Paint test (Markdown + JSON)."),
    "summary": ("eval.summary", "cli", "Print the table of the runs `make eval` made."),
    "photos-val": ("eval.photos_val", "cli", "Score the captioners on the GCompris / openclipart validation photos."),
    "scaling": ("eval.commands.scaling", "cli", "Fit the alignment scaling law over runs."),
    "scenelab": ("eval.commands.scenelab", "cli", "Check the theorem in a controlled world (and its diagnostics)."),
    "world": ("eval.commands.world", "cli", "The JEPA world's table: text encoder x rotation (report)."),
    "align": ("eval.commands.align", "cli", "Benchmark the matchers; validate the pair-free diagnosis."),
    "experiment": ("eval.experiments", "cli", "One-off experiments behind figures in docs/results."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """The experiments beside the captioner: reports, studies, benchmarks and one-off experiments.

    Results go under $CAPTIONER_HOME (default ~/.cache/captioner) unless a command's --out says otherwise."""


def main(argv=None):
    return run(cli, argv, "python -m eval")


if __name__ == "__main__":
    main()
