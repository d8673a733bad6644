"""``python -m eval world report``: the JEPA world's table (``eval.world.table``)."""
from __future__ import annotations

import json

import click

from captioner.world.models import PRESETS


@click.group()
def cli():
    """The JEPA world's experiments: its table (``report``); train its encoders with ``captioner world train``."""


@cli.command("report")
@click.option("--preset", type=click.Choice([p for p in PRESETS if p != "smoke"]), default="lab", show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True, help="world seeds, comma-separated (each trained)")
@click.option("--text", "texts", default=None,
              help="text encoders, comma-separated (default all: text-jepa,ntp,ntp-last,untrained,minilm-l6; with "
                   "--scenes train: text-jepa,ntp,untrained)")
@click.option("--rotations", default=None,
              help="rotations, comma-separated (default: paired,pairfree-disjoint,pairfree-same,pairfree-uniform,"
                   "lattice-disjoint,lattice-same,gw,random; with --scenes train: paired,lattice-disjoint,"
                   "lattice-estimated,auto-disjoint,random)")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="folder for results.json and world.md (default $CAPTIONER_HOME/world/report-<preset>)")
@click.option("--device", default="cpu", show_default=True)
@click.option("--scenes", type=click.Choice(["all", "train"]), default="all", show_default=True,
              help="the encoders trained on all scenes, or on each seed's train scenes only (`captioner world train "
                   "--scenes train`; default --out then report-<preset>-train)")
@click.option("--jobs", type=int, default=None,
              help="seeds computed at once, each in a process of its own on one core (default: one a core on the "
                   "CPU, at most one a seed; 1 on an accelerator)")
@click.option("--json", "as_json", is_flag=True, help="print results.json")
@click.option("--quiet", is_flag=True, help="no progress lines")
def report_cli(preset, seeds, texts, rotations, out, device, scenes, jobs, as_json, quiet):
    """The world's table: text encoder x rotation (paired, pair-free on disjoint or the same scenes, POT GW,
    random), with matcher accuracy, held-out residual, R@1, CIDEr x100 and zero-shot top-1, mean +- std
    over seeds, and the issue's targets. Each seed's rows are kept and reused while its models are."""
    from captioner.errors import CaptionerError
    from eval.world.chain import ROTATIONS, TEXT_ENCODERS
    from eval.world.table import world_report

    def listed(s, known, what):
        if s is None:
            return None
        got = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in got if x not in known]
        if bad or not got:
            raise CaptionerError(f"unknown {what} {bad[0] if bad else s!r}; choose from {', '.join(known)}")
        return got

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise CaptionerError(f"--seeds must be integers separated by commas, not {seeds!r}") from None
    res = world_report(preset, seed_list, out=out, device=device, progress=not quiet,
                       text_keys=listed(texts, TEXT_ENCODERS, "text encoder"),
                       rotation_keys=listed(rotations, ROTATIONS, "rotation"), scenes=scenes, jobs=jobs)
    from eval.world.table import format_table

    click.echo(json.dumps(res, indent=2) if as_json else format_table(res))
