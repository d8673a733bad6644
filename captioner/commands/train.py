"""``captioner train``, ``captioner scaling`` and ``captioner scenelab``: thin drivers over captioner.jepa
and eval.scaling."""
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
def scaling_cli(preset, out, force, workers, as_json, quiet):
    """Fit alignment scaling laws over runs at several sample counts and seeds: the saturating power law
    a(n) = a_inf - b n^-c, and a logistic in log n from chance to the world's ceiling.

    Trains text JEPAs (good views) and next-token baselines (bad views) in the scene lab, measures mutual
    k-NN against the image JEPA on held-out pairs, fits each law on the smaller n, predicts the largest,
    and reports the prediction error against the seed spread, the sample ratio NTP / JEPA at equal
    alignment, a PNG plot, results.json and results.md. Runs already done are skipped (also by a preset
    that adds sample counts or seeds); a second call on the same folder (or --workers) shares the runs out."""
    from eval.scaling import format_table, run_scaling

    res = run_scaling(preset, out=out, force=force, progress=not quiet, workers=workers)
    click.echo(json.dumps(res, indent=2) if as_json else format_table(res))


@click.command("scenelab")
@click.option("--preset", default="tiny", show_default=True, help="model preset for the three encoders")
@click.option("--steps", type=int, default=None, help="training steps for each model (default: 4800 image, 3200 text)")
@click.option("--image-steps", type=int, default=None, help="image JEPA steps (overrides --steps)")
@click.option("--text-steps", type=int, default=None, help="text JEPA and NTP steps (overrides --steps)")
@click.option("--lr", type=float, default=None, help="peak learning rate (default 4e-3)")
@click.option("--text-lr", type=float, default=None, help="text JEPA and NTP learning rate (default: --lr)")
@click.option("--reg", type=click.Choice(["sigreg", "vicreg", "cov", "infonce"]), default=None,
              help="both JEPAs' collapse-preventing regulariser (default: the preset's, sigreg)")
@click.option("--reg-weight", type=float, default=None,
              help="loss = (1 - w) * prediction + w * regulariser (default 0.1)")
@click.option("--pred-hidden", type=int, default=None,
              help="JEPA predictor hidden width; 0 = a linear predictor (default 0)")
@click.option("--text-reg-weight", type=float, default=None,
              help="text JEPA and NTP regulariser weight (overrides --reg-weight on the text side only)")
@click.option("--text-pred-hidden", type=int, default=None,
              help="text JEPA predictor hidden width (overrides --pred-hidden on the text side only; 0 = linear)")
@click.option("--image-pool", type=click.Choice(["mean", "flatten", "mean+flatten", "mean+coords"]), default=None,
              help="image JEPA CNN pooling (default mean+coords: the global average and each channel's "
                   "soft-argmax position; mean+flatten: the average beside the flattened map)")
@click.option("--init-from", type=click.Path(exists=True, file_okay=False), default=None,
              help="a previous scene-lab folder: each model starts from its checkpoint there (fine-tuning, "
                   "e.g. SIGReg-trained encoders with --reg cov)")
@click.option("--restarts", type=click.IntRange(min=1), default=1, show_default=True,
              help="train each JEPA this many times (init seeds seed, seed+1000, ...) and keep the lowest final "
                   "training loss (label-free)")
@click.option("--embed-dim", type=click.IntRange(min=1), default=None,
              help="both JEPAs' embedding width (default 12: the view kernel's leading eigenspace)")
@click.option("--view-k", type=click.IntRange(min=0), default=None,
              help="score each JEPA on its K most view-predictable directions (fitted on its own two training "
                   "views, no cross-modal pair); default 12 when --embed-dim is wider, else the raw embedding; "
                   "0: never")
@click.option("--n-train", type=int, default=None, help="training scenes (default 12000)")
@click.option("--n-test", type=int, default=None, help="held-out (render, caption) pairs (default 324: every scene)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="run folder (default $CAPTIONER_HOME/runs/scenelab); trained models found there are reused "
                   "(use a new folder when changing steps or learning rates)")
@click.option("--json", "as_json", is_flag=True, help="print the result JSON")
@click.option("--quiet", is_flag=True, help="no progress bar")
def scenelab_cli(preset, steps, image_steps, text_steps, lr, text_lr, reg, reg_weight, pred_hidden, text_reg_weight,
                 text_pred_hidden, image_pool, init_from, restarts, embed_dim, view_k, n_train, n_test, seed, out,
                 as_json, quiet):
    """Check the theorem in a controlled world: image JEPA vs text JEPA vs next-token LM.

    Generates latent scenes (colour, size, position, background), renders them (32 px) and describes them with
    paraphrased captions; trains the image JEPA on two renders of a scene, the text JEPA on two
    paraphrases, and the next-token LM on a scene's captions as one document; prints mutual k-NN and the
    held-out Procrustes residual between each text side and the image JEPA."""
    from captioner.jepa.scenelab import LabConfig, format_table, run_lab

    def given(**opts):  # the options the user set (0 is a setting for pred_hidden: test None, not falsity)
        return {k: v for k, v in opts.items() if v is not None}

    kw = {"preset": preset, "seed": seed}
    if steps:
        kw.update(image_steps=steps, text_steps=steps)
    # counts and rates of 0 mean "unset", as before
    kw.update({k: v for k, v in given(image_steps=image_steps, text_steps=text_steps, lr=lr, text_lr=text_lr,
                                      n_train=n_train, n_test=n_test).items() if v})
    objective = given(reg=reg, reg_weight=reg_weight, pred_hidden=pred_hidden)
    if objective:   # over the lab's defaults, not instead of them
        kw["objective"] = {**LabConfig().objective, **objective}
    text_objective = given(reg_weight=text_reg_weight, pred_hidden=text_pred_hidden)
    if text_objective:
        kw["text_objective"] = text_objective
    if image_pool:
        kw["image"] = {**LabConfig().image, "pool": image_pool}
    if init_from:
        kw["init_from"] = str(init_from)
    if restarts > 1:
        kw["restarts"] = restarts
    kw.update(given(embed_dim=embed_dim, view_k=view_k))
    res = run_lab(LabConfig(**kw), out=out, progress=not quiet)
    click.echo(json.dumps(res, indent=2) if as_json else format_table(res))
