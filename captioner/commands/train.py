"""``captioner train``: a thin driver over captioner.jepa."""
from __future__ import annotations

import json
import re

import click

KIND_HELP = {
    "text-jepa": "Train a text JEPA: one view of a scene predicts another (good views).",
    "ntp": "Train the next-token baseline on the same corpus (a scene's texts as one document: bad views).",
    "image-jepa": "Train an image JEPA on two augmented views of one image (or two renders of one scene).",
}


@click.group()
def cli():
    """Train a text JEPA, the next-token baseline or an image JEPA.

    Runs are resumable (--resume), seeded, and write checkpoint.pt, config.json and log.csv to --out
    (default $CAPTIONER_HOME/checkpoints/<kind>-<preset>-<corpus>). A finished run is an encoder:
    `captioner embed --encoder jepa:<out> ...`."""


def _options(f):
    opts = [
        click.option("--preset", default="tiny", show_default=True,
                     help="tiny (CPU, about a minute), small, base-109m (GPU), or a preset .json"),
        click.option("--corpus", default=None,
                     help="text: cupl | cupl+names | scenelab | FILE.json (scenes: lists of >= 2 texts); "
                          "image: scenelab | a dataset name (tuxpaint, emoji, ...). Default: cupl / scenelab"),
        click.option("--steps", type=int, default=None, help="total optimizer steps (preset default)"),
        click.option("--out", type=click.Path(file_okay=False), default=None, help="run folder"),
        click.option("--resume", is_flag=True, help="continue from the checkpoint in --out"),
        click.option("--init-from", type=click.Path(exists=True), default=None,
                     help="start from this checkpoint's weights (same kind and architecture) at step 0, e.g. "
                          "to fine-tune with another --reg"),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--batch-size", type=int, default=None),
        click.option("--lr", type=float, default=None),
        click.option("--reg", type=click.Choice(["sigreg", "vicreg", "cov", "infonce"]), default=None,
                     help="collapse-preventing regulariser (JEPAs)"),
        click.option("--target", type=click.Choice(["stopgrad", "ema", "none"]), default=None,
                     help="prediction target: stop-gradient online embedding or an EMA encoder"),
        click.option("--n-scenes", type=int, default=None, help="use the first N scenes of the corpus"),
        click.option("--save-every", type=int, default=None, help="checkpoint every N steps"),
        click.option("--device", default=None, help="cpu (default for tiny/small) or auto (GPU(s) via accelerate)"),
        click.option("--precision", type=click.Choice(["no", "bf16", "fp16"]), default=None),
        click.option("--threads", type=int, default=None, help="torch CPU threads (0: torch default)"),
        click.option("--json", "as_json", is_flag=True, help="print the run summary as JSON"),
        click.option("--quiet", is_flag=True, help="no progress bar"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _run(kind, preset, corpus, steps, out, resume, init_from, seed, batch_size, lr, reg, target, n_scenes, save_every,
         device, precision, threads, as_json, quiet):
    from captioner.jepa.train import resolve_config, train
    from captioner.paths import subdir

    corpus = corpus or ("scenelab" if kind == "image-jepa" else "cupl")
    objective = {k: v for k, v in (("reg", reg), ("target", target)) if v is not None}
    cfg = resolve_config(kind, preset, corpus=corpus, steps=steps, seed=seed, batch_size=batch_size, lr=lr,
                         n_scenes=n_scenes, save_every=save_every, device=device, precision=precision,
                         threads=threads, objective=objective or None, init_from=init_from)
    if out is None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", corpus.rsplit("/", 1)[-1].removesuffix(".json")).strip("-")
        out = subdir("checkpoints") / f"{kind}-{cfg.preset}-{slug}"
    summary = train(cfg, out, resume=resume, progress=not quiet)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        first = f"{summary['first_loss']:.4f}" if summary["first_loss"] is not None else "-"
        last = f"{summary['last_loss']:.4f}" if summary["last_loss"] is not None else "-"
        click.echo(f"{kind}/{cfg.preset} on {corpus}: step {summary['step']} (from {summary['resumed_from']}), "
                   f"loss {first} -> {last}, {summary['seconds']} s, {summary['params']:,} params")
        click.echo(f"checkpoint: {out}   (encoder name: jepa:{out})")


def _make(kind):
    @cli.command(kind, help=KIND_HELP[kind])
    @_options
    def cmd(**kw):
        _run(kind, **kw)

    return cmd


for _k in KIND_HELP:
    _make(_k)
