"""What the two command lines share: a click group whose commands are imported only when invoked
(``LazyGroup``), and the entry point that prints a ``CaptionerError`` as one line (``run``).

``captioner`` (the product, ``captioner/cli.py``) and ``python -m eval`` (the experiments, ``eval/cli.py``)
are both built from these, so that their help stays instant and their errors read the same."""
from __future__ import annotations

import importlib
import sys

import click

from captioner.errors import CaptionerError


class LazyGroup(click.Group):
    """A group over ``lazy``: {command name: (module, attribute, one-line help)}; a command's module is
    imported only when that command runs (or its own help is asked for)."""

    def __init__(self, *args, lazy: dict | None = None, **kw):
        super().__init__(*args, **kw)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx):
        return sorted({*self.lazy, *self.commands})

    def get_command(self, ctx, name):
        if name in self.commands:
            return self.commands[name]
        if name not in self.lazy:
            return None
        module, attr, _ = self.lazy[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, self.lazy[name][2] if name in self.lazy else self.commands[name].get_short_help_str())
                for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def run(group: click.Group, argv, prog: str):
    """Run ``group`` as the program ``prog``: click's usage errors as click prints them, a
    ``CaptionerError`` as one line ``error: ...`` and exit status 2, Ctrl-C as "Aborted." and 1."""
    from captioner.threads import configure

    try:
        configure()  # thread counts and spinning, before any command imports torch
        return group.main(args=argv, prog_name=prog, standalone_mode=False)
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
