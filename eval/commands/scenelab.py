"""``python -m eval scenelab``: a thin driver over eval.scenelab (the lab, and its diagnostics as subcommands)."""
from __future__ import annotations

import json

import click

from captioner.clikit import LazyGroup

# the lab's diagnostics: name -> (module, attribute, one-line help)
DIAGNOSTICS = {
    "diagnose": ("eval.scenelab.diagnose", "cli", "Where a lab's residual comes from (LAB [--views 8] [--json])."),
    "anchor": ("eval.scenelab.anchor", "cli", "Train a supervised image encoder to start a lab from (LAB --out ANCHOR)."),
    "objective": ("eval.scenelab.objective", "cli", "Each regulariser's optimum with an unlimited encoder."),
}


@click.group("scenelab", cls=LazyGroup, lazy=DIAGNOSTICS, invoke_without_command=True)
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
@click.pass_context
def cli(ctx, preset, steps, image_steps, text_steps, lr, text_lr, reg, reg_weight, pred_hidden,
                 text_reg_weight, text_pred_hidden, image_pool, init_from, restarts, embed_dim, view_k, n_train, n_test,
                 seed, out, as_json, quiet):
    """Check the theorem in a controlled world: image JEPA vs text JEPA vs next-token LM.

    Generates latent scenes (colour, size, position, background), renders them (32 px) and describes them with
    paraphrased captions; trains the image JEPA on two renders of a scene, the text JEPA on two
    paraphrases, and the next-token LM on a scene's captions as one document; prints mutual k-NN and the
    held-out Procrustes residual between each text side and the image JEPA.

    The lab's diagnostics are subcommands: ``diagnose LAB``, ``anchor LAB --out ANCHOR``, ``objective``
    (each with its own --help)."""
    if ctx.invoked_subcommand is not None:
        return
    from eval.scenelab.lab import LabConfig, format_table, run_lab

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
