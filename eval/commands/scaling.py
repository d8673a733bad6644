"""``python -m eval scaling``: a thin driver over eval.scaling."""
from __future__ import annotations

import json

import click


@click.command("scaling")
@click.option("--preset", default="cpu", show_default=True,
              help="cpu (short runs, ~20 min on one core), lab (the scene lab's training, 100-3200 steps, NTP "
                   "to 25,600, read at its mean and its last token; ~2.5 h with --workers 2), full (longer curves), quick / quick-lab (tests)")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="results folder (default $CAPTIONER_HOME/runs/scaling-<preset>)")
@click.option("--force", is_flag=True, help="retrain runs whose result already exists")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="processes training runs at once on this machine (torch threads shared out among them)")
@click.option("--json", "as_json", is_flag=True, help="print the results JSON")
@click.option("--quiet", is_flag=True, help="no progress bar")
def cli(preset, out, force, workers, as_json, quiet):
    """Fit alignment scaling laws over runs at several sample counts and seeds: the saturating power law
    a(n) = a_inf - b n^-c, and a logistic in log n from chance to the world's ceiling.

    Trains text JEPAs (good views) and next-token baselines (bad views) in the scene lab, measures mutual
    k-NN against the image JEPA on held-out pairs, fits each law on the smaller n, predicts the largest,
    and reports the prediction error against the seed spread, the sample ratio NTP / JEPA at equal
    alignment, a PNG plot, results.json and results.md. Runs already done are skipped (also by a preset
    that adds sample counts or seeds); a second call on the same folder (or --workers) shares the runs out."""
    from eval.scaling.report import format_table
    from eval.scaling.runs import run_scaling

    res = run_scaling(preset, out=out, force=force, progress=not quiet, workers=workers)
    click.echo(json.dumps(res, indent=2) if as_json else format_table(res))
