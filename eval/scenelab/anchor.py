"""Start a scene lab's image JEPA at the answer: is its residual the CNN's limit or the objective's pull?

    python -m eval scenelab anchor LAB --out ANCHOR [--steps 2000]
    python -m eval scenelab --init-from ANCHOR --n-train N --image-steps 1600 --text-steps 1 --lr 1e-3 --out ANCHOR-sigreg

``LAB`` is a finished ``python -m eval scenelab --out LAB`` folder. The first command trains a fresh image
encoder of LAB's architecture *with labels* (diagnostic only: no lab result uses them), by least squares
onto the whitened latents (``scenelab.latent_features``) of what each of LAB's training renders shows
(``scenelab.observed_scenes``: corrupted attributes included), on the same renders and augmentations.
It prints the encoder's held-out residual against the latents (the lab's score, clean test renders)
and writes ANCHOR as a lab folder: ``image-jepa/checkpoint.pt`` holds that encoder (and, for a linear
predictor, the theorem's predictor: the view kernel's eigenvalue (1 - CORRUPT)^2 times the identity);
``text-jepa`` and ``ntp`` are LAB's kept checkpoints. ``python -m eval scenelab --init-from ANCHOR`` then trains
the JEPA objective from the answer: if the residual stays near the anchor's, the answer is a fixed point
of the objective and a lab run far from it is an optimisation failure; if it drifts back to the lab's
figure, the objective itself (with this encoder and these views) prefers the warp.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import click
import numpy as np


def train_anchor(lab, out, steps: int = 2000, batch_size: int = 128, lr: float = 2e-3, progress: bool = True) -> dict:
    import torch
    from tqdm.auto import tqdm

    from captioner.errors import CaptionerError
    from captioner.jepa import embed as E
    from captioner.jepa import views as V
    from captioner.jepa.train import load_checkpoint
    from captioner.paths import atomic_write_json
    from captioner.world import scenes as W
    from eval.scenelab import lab as S
    from eval.scenelab import measures as M
    from eval.scenelab.diagnose import load_kept

    lab, out = Path(lab), Path(out)
    cfg = S.lab_config(lab)
    if cfg is None:
        raise CaptionerError(f"scenelab_anchor: {lab} is not a finished lab (no scenelab.json); "
                             f"run `python -m eval scenelab --out {lab}` first")
    if out.resolve() == lab.resolve():
        raise CaptionerError("scenelab_anchor: --out must be another folder than LAB")
    if cfg.embed_dim != W.LATENT_DIM:
        raise CaptionerError(f"scenelab_anchor: {lab} has {cfg.embed_dim}-d embeddings; the anchor is the "
                             f"{W.LATENT_DIM}-d latents")
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    model, tc = load_kept(lab, "image-jepa")
    enc = model.encoder
    for m in enc.modules():                      # a fresh encoder of the same architecture
        if hasattr(m, "reset_parameters") and m is not enc:
            m.reset_parameters()
    if getattr(enc.backbone, "log_sharp", None) is not None:
        torch.nn.init.zeros_(enc.backbone.log_sharp)
    scenes = W.sample_scenes(cfg.n_train, seed=cfg.seed)
    size = tc.image.image_size
    arr = W.render_array(scenes, cfg.n_renders, size, seed=cfg.seed)                  # (N, R, 3, H, W)
    obs = W.observed_scenes(scenes, cfg.n_renders, seed=cfg.seed)
    target = torch.tensor(np.stack([W.latent_features(o) for o in obs]), dtype=torch.float32)   # (N, R, 12)
    aug = S.augment_config(cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(enc.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.05)
    enc.train()
    bar = tqdm(range(steps), desc="anchor image encoder (supervised)", disable=not progress)
    losses = []
    for _ in bar:
        i = torch.randint(0, len(scenes), (batch_size,), generator=g)
        r = torch.randint(0, cfg.n_renders, (batch_size,), generator=g)
        x = V.augment(arr[i, r].float() / 255.0, aug, g)
        loss = ((enc(x) - target[i, r]) ** 2).mean()
        if not torch.isfinite(loss):
            raise CaptionerError("scenelab_anchor: the supervised loss is not finite; try a lower --lr")
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    enc.eval()
    test_scenes, ims, _ = S.test_pairs(cfg, size)
    residual = M.procrustes_residual(E.embed_images(model, ims), W.latent_features(test_scenes))

    out.mkdir(parents=True, exist_ok=True)
    for kind in ("text-jepa", "ntp"):
        (out / kind).mkdir(exist_ok=True)
        shutil.copy(S.kept_run(lab, kind) / "checkpoint.pt", out / kind / "checkpoint.pt")
    ck = load_checkpoint(S.kept_run(lab, "image-jepa") / "checkpoint.pt")
    state = model.state_dict()
    ck["model"].update({k: v for k, v in state.items() if k.startswith("encoder.")})
    if isinstance(model.pred, torch.nn.Linear):
        ck["model"]["pred.weight"] = (1 - W.CORRUPT) ** 2 * torch.eye(W.LATENT_DIM)
        ck["model"]["pred.bias"] = torch.zeros(W.LATENT_DIM)
    (out / "image-jepa").mkdir(exist_ok=True)
    torch.save(ck, out / "image-jepa" / "checkpoint.pt")
    res = {"lab": str(lab), "out": str(out), "n_train": cfg.n_train, "steps": steps, "batch_size": batch_size, "lr": lr,
           "final_loss": float(np.mean(losses[-max(1, steps // 10):])), "residual_vs_latents": residual,
           "seconds": round(time.time() - t0, 1)}
    atomic_write_json(out / "anchor.json", res)
    return res


@click.command("anchor", help=__doc__)
@click.argument("lab", type=click.Path())
@click.option("--out", required=True, help="the anchor folder to write (then `python -m eval scenelab --init-from` it)")
@click.option("--steps", type=int, default=2000, show_default=True, help="supervised steps")
@click.option("--lr", type=float, default=2e-3, show_default=True, help="peak learning rate")
@click.option("--quiet", is_flag=True, help="no progress bar")
def cli(lab, out, steps, lr, quiet):
    res = train_anchor(lab, out, steps=steps, lr=lr, progress=not quiet)
    print(json.dumps(res, indent=2))
    print(f"\n| anchor (supervised, labels) | steps | final training loss | residual vs latents (held out) |\n"
          f"| --- | ---: | ---: | ---: |\n| {res['out']} | {res['steps']} | {res['final_loss']:.4f} | "
          f"{res['residual_vs_latents']:.3f} |\n\nThen: python -m eval scenelab --init-from {res['out']} "
          f"--n-train {res['n_train']} --image-steps 1600 --text-steps 1 --lr 1e-3 --out {res['out']}-sigreg")
