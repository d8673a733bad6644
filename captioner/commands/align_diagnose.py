"""``captioner align diagnose``: can a pair-free rotation be found?

The signals and verdict are ``alignment.diagnose``; their validation on cases with a known answer is an
experiment (``python -m eval align diagnose-validate``, ``eval.pairfree_diagnose``).
"""
from __future__ import annotations

import json

import click

from captioner.errors import CaptionerError


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


@click.command("diagnose")
@click.option("--image-cache", "-a", required=True, type=click.Path())
@click.option("--text-cache", "-b", required=True, type=click.Path())
@click.option("--restarts", type=int, default=3, show_default=True, help="Bootstrap restarts of the matcher.")
@click.option("--pairs/--no-pairs", default=True, show_default=True,
              help="Also report the paired signals (CKA, mutual k-NN, their nulls) where sample ids match.")
@click.option("--n-perm", type=int, default=20, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--matcher", default="auto", show_default=True,
              help="The pair-free matcher whose answers are judged (`captioner align matchers` lists them).")
@click.option("--json", "as_json", is_flag=True)
def diagnose_cmd(image_cache, text_cache, restarts, pairs, n_perm, seed, matcher, as_json):
    """Say, before matching, whether a pair-free rotation between the two caches can be found, and why."""
    import numpy as np

    from alignment.diagnose import diagnose
    from captioner.commands.align import cache_pairs, load_cache, user_errors

    img, txt = load_cache(image_cache, "image"), load_cache(text_cache, "text")
    with user_errors():
        if not np.isfinite(img.X).all() or not np.isfinite(txt.X).all():
            bad = "image" if not np.isfinite(img.X).all() else "text"
            raise CaptionerError(f"the {bad} cache has NaN or infinite rows; re-embed it (captioner embed --force)")
        pr = None
        if pairs:
            X, Y, sids = cache_pairs(img, txt, "mean")
            pr = (X, Y) if len(sids) >= 8 else None
        res = diagnose(img.X, txt.X, pairs=pr, restarts=restarts, n_perm=n_perm, seed=seed, matcher=matcher)
    if as_json:
        click.echo(json.dumps(res, default=float))
        return
    u = res["unpaired"]
    click.echo(f"{res['n_x']} image rows ({res['d_x']}-d), {res['n_y']} text rows ({res['d_y']}-d)")
    click.echo("without pairs (rotation-invariant):")
    for k in ("spectrum", "distances", "knn_graph", "stability", "matcher_score", "surrogate_score",
              "surrogate_margin"):
        click.echo(f"  {k:<17} {_fmt(u[k])}")
    if res["paired"]:
        click.echo("with pairs (score, null mean +- sd, z):")
        for k, r in res["paired"].items():
            click.echo(f"  {k:<17} {r['score']:.3f}  {r['null_mean']:.3f} +- {r['null_std']:.3f}  z {r['z']:.1f}")
    click.echo(f"verdict: {res['verdict'].upper()}: {res['reason']}")


def _group():
    """``captioner align``: the fit / score / matchers commands of ``commands.align`` and ``diagnose``."""
    from captioner.commands.align import cli as group

    group.add_command(diagnose_cmd)
    return group


cli = _group()
