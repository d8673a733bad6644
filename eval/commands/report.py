"""``python -m eval report``: the results table on the embedded Tux Paint test split (Markdown + JSON)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from captioner.evaluation.runs import ROTATION_CHOICES, ZEROSHOT_MODES, build_eval_pipeline, runs_dir


@click.command("report")
@click.option("--out", type=click.Path(), default=None, help="Folder for report.md and report.json "
              "(default $CAPTIONER_HOME/runs/report).")
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--meteor/--no-meteor", default=True, show_default=True)
@click.option("--decoder-preset", default=None, help="tiny, small, base (default: small on CPU, base on CUDA).")
@click.option("--rotations", default=",".join(ROTATION_CHOICES), show_default=True,
              help="Comma-separated rotations (text = the text-only ceiling).")
@click.option("--captioners", default="retrieval,decoder", show_default=True)
@click.option("--zeroshot-modes", default=",".join(ZEROSHOT_MODES), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON instead of the Markdown.")
@click.option("--quiet", "-q", is_flag=True)
def cli(out, image_encoder, text_encoder, device, meteor, decoder_preset, rotations, captioners,
        zeroshot_modes, as_json, quiet):
    """Write the results table (Markdown + JSON) on the embedded Tux Paint test split: each captioner
    (retrieval; decoder, reading DeCap's projection or, for the head map, its query) x rotation (paired Procrustes, pair-free, ridge, random), the
    text-only ceiling, and zero-shot accuracy on the Tux Paint categories."""
    from eval.report import build_report

    pipe, test = build_eval_pipeline(None, image_encoder, text_encoder, device, not quiet,
                                     decoder_preset=decoder_preset)
    out = Path(out) if out else runs_dir("report")
    t0 = time.time()
    def names(v, allowed, what):
        got = [x.strip() for x in v.split(",") if x.strip()]
        bad = [x for x in got if x not in allowed]
        if bad:
            raise click.BadParameter(f"unknown {what} {bad[0]!r}; choose from {', '.join(allowed)}")
        return tuple(got)

    rep = build_report(pipe, test, out, meteor=meteor, progress=not quiet,
                       rotations=names(rotations, ROTATION_CHOICES, "rotation"),
                       captioners=names(captioners, ("retrieval", "decoder"), "captioner"),
                       zeroshot_modes=names(zeroshot_modes, ZEROSHOT_MODES, "zero-shot mode"))
    if as_json:
        click.echo(json.dumps(rep["json"], indent=2))
        return
    click.echo(rep["markdown"])
    from eval.world.table import world_section

    world = world_section()   # the JEPA world's table, when `python -m eval world report` has made one
    if world:
        (out / "world.md").write_text(world + "\n")
        click.echo("\n" + world)
    click.echo(f"\nwritten: {rep['files']['markdown']} and {rep['files']['json']} ({time.time() - t0:.0f} s)")
