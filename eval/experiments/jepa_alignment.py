"""Alignment with a vision encoder on real data: our text JEPA (trained on CuPL, good views) against MiniLM-L6
(contrastive, a billion sentence pairs) and SmolLM2-135M (next-token prediction, bad views), each measured
by mutual k-NN with EfficientNet-Lite0 on the same held-out Tux Paint (image, caption) pairs, with the
permutation null (captions shuffled against images) beside each.

    python -m eval experiment jepa-alignment [--steps 300] [--batch-size 64] [--jepa PATH] [--out DIR] [--json]
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

DEFAULT_TEXT = ["minilm-l6", "smollm2-135m"]


def train_cupl_jepa(steps: int = 300, preset: str = "small", out=None, progress: bool = True, **over) -> Path:
    """Train (or resume, or reuse) the text JEPA on CuPL; returns its run folder."""
    from captioner.jepa.train import load_checkpoint, resolve_config, train
    from captioner.paths import subdir

    out = Path(out) if out else subdir("checkpoints") / f"text-jepa-{preset}-cupl"
    cfg = resolve_config("text-jepa", preset, corpus="cupl", steps=steps, **over)
    if (out / "checkpoint.pt").exists() and load_checkpoint(out)["step"] >= steps:
        return out
    train(cfg, out, resume=True, progress=progress)
    return out


def run_jepa_alignment(jepa: str | None = None, steps: int = 300, preset: str = "small", k: int = 10,
                       n_perm: int = 200, text_encoders=None, image_encoder: str = "efficientnet-lite0",
                       split: str = "test", out=None, progress: bool = True, threads: int | None = 1,
                       batch_size: int | None = 64) -> dict:
    """Mutual k-NN (+ permutation null) of each text encoder with ``image_encoder`` on Tux Paint ``split``.

    Parameters
    ----------
    jepa : a text JEPA run folder; None trains one on CuPL (``steps`` x ``batch_size`` of ``preset``) first
        (about 1.5 s a step for small at batch 64 on one contended CPU thread).
    text_encoders : registry names compared beside the JEPA (default MiniLM-L6 and SmolLM2-135M).

    Returns
    -------
    dict with "rows" (encoder, dim, mutual_knn, null_mean, null_std, z, p) and the setup; also written
    to ``out`` (default ``<home>/runs/jepa-alignment``) as results.json and results.md.
    """
    from alignment.metrics import permutation_null
    from captioner.cache import embed, paired
    from captioner.datasets import get_dataset
    from captioner.paths import atomic_write_json, subdir

    t0 = time.time()
    over = {k: v for k, v in (("threads", threads), ("batch_size", batch_size)) if v}
    jepa_dir = Path(jepa) if jepa else train_cupl_jepa(steps, preset, progress=progress, **over)
    names = [f"jepa:{jepa_dir}"] + list(text_encoders or DEFAULT_TEXT)
    ds = get_dataset("tuxpaint", split=split)
    img = embed(image_encoder, ds, "image", progress=progress)
    rows = []
    for name in names:
        txt = embed(name, ds, "text", progress=progress)
        X, Y, sids = paired(img, txt)
        r = permutation_null("mutual_knn", X, Y, n_perm=n_perm, seed=0, k=k)
        rows.append({"text_encoder": "text JEPA (CuPL, ours)" if name.startswith("jepa:") else name,
                     "name": name, "dim": int(txt.X.shape[1]), "n_pairs": len(sids),
                     "mutual_knn": r["score"], "null_mean": r["null_mean"], "null_std": r["null_std"],
                     "z": r["z"], "p": r["p"]})
    from captioner.jepa.train import load_checkpoint

    ck = load_checkpoint(jepa_dir)
    res = {"image_encoder": image_encoder, "dataset": f"tuxpaint/{split}", "k": k, "n_perm": n_perm,
           "jepa": {"path": str(jepa_dir), "preset": ck["config"]["preset"], "steps": int(ck["step"]),
                    "corpus": ck["config"]["corpus"], "batch_size": ck["config"]["batch_size"]},
           "chance": k / (rows[0]["n_pairs"] - 1) if rows else None, "rows": rows,
           "seconds": round(time.time() - t0, 1)}
    out = Path(out) if out else subdir("runs") / "jepa-alignment"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", res)
    (out / "results.md").write_text(format_table(res) + "\n")
    return res


def format_table(res: dict) -> str:
    k = res["k"]
    j = res["jepa"]
    lines = [f"Mutual {k}-NN with {res['image_encoder']} on {res['dataset']} "
             f"({res['rows'][0]['n_pairs'] if res['rows'] else 0} pairs; permutation null over {res['n_perm']} "
             f"caption shuffles).", "",
             f"| text encoder | dim | mutual {k}-NN | null mean +- std | z |", "| --- | ---: | ---: | ---: | ---: |"]
    for r in res["rows"]:
        lines.append(f"| {r['text_encoder']} | {r['dim']} | {r['mutual_knn']:.3f} | {r['null_mean']:.3f} +- "
                     f"{r['null_std']:.3f} | {r['z']:.1f} |")
    lines.append(f"\nText JEPA: preset {j['preset']}, {j['steps']} steps x batch {j['batch_size']} on {j['corpus']}; "
                 f"{res['seconds']} s.")
    return "\n".join(lines)


@click.command("jepa-alignment", help=__doc__)
@click.option("--jepa", default=None, help="a trained text JEPA run folder (default: train on CuPL)")
@click.option("--steps", type=int, default=300, show_default=True)
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--preset", default="small", show_default=True)
@click.option("--k", type=int, default=10, show_default=True)
@click.option("--n-perm", type=int, default=200, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch CPU threads while training the JEPA")
@click.option("--out", default=None)
@click.option("--json", "as_json", is_flag=True)
def cli(jepa, steps, batch_size, preset, k, n_perm, threads, out, as_json):
    res = run_jepa_alignment(jepa, steps, preset, k, n_perm, out=out, threads=threads, batch_size=batch_size)
    print(json.dumps(res, indent=2) if as_json else format_table(res))
