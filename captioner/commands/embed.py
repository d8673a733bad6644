"""``captioner embed`` and ``captioner encoders``."""
from __future__ import annotations

import json
import time

import click

from captioner.datasets import DATASETS


@click.command("embed")
@click.option("--encoder", "-e", required=True, help="Encoder name (see `captioner encoders`).")
@click.option("--dataset", "-d", default="tuxpaint", show_default=True,
              help=", ".join(DATASETS) + ".")
@click.option("--split", "-s", default="test", show_default=True, help="train, val, test or all (val2014 ... for coco-official).")
@click.option("--root", type=click.Path(), default=None, help="Dataset folder (coco, imagenet100, folder).")
@click.option("--world-seed", type=int, default=None,
              help="--dataset world: the seed of its scene splits (default 0; use the seed of the world's encoders).")
@click.option("--modality", type=click.Choice(["image", "text"]), default=None,
              help="Default: the encoder's own modality.")
@click.option("--batch-size", "-b", default=32, show_default=True)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, mps ...")
@click.option("--out", type=click.Path(), default=None, help="Cache file (default: keyed name under $CAPTIONER_HOME).")
@click.option("--force", is_flag=True, help="Re-encode even if a matching cache exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def cli(encoder, dataset, split, root, world_seed, modality, batch_size, device, out, force, as_json):
    """Encode a dataset split into the embedding cache (safetensors + JSON sidecar).

    A second run with the same encoder, dataset and split reuses the cache. Unreadable images are
    skipped and counted. Under `accelerate launch` the processes split the work."""
    from captioner.cache import embed
    from captioner.datasets import get_dataset

    if world_seed is not None and dataset != "world":
        raise click.UsageError("--world-seed goes with --dataset world")
    ds = get_dataset(dataset, split, root=root, **({"seed": world_seed} if world_seed is not None else {}))
    t0 = time.time()
    es = embed(encoder, ds, modality=modality, batch_size=batch_size, device=device, force=force, out=out)
    dt = time.time() - t0
    summary = {"path": str(es.path), "encoder": es.meta["encoder"]["name"], "dataset": ds.name, "split": ds.split,
               "modality": es.meta["modality"], "N": es.meta["N"], "D": es.meta["D"],
               "skipped": es.meta["n_skipped"] + len(ds.skipped), "seconds": round(dt, 3)}
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(f"{summary['N']} x {summary['D']} {summary['modality']} embeddings -> {summary['path']} "
               f"({dt:.2f} s)")
    for sid, why in (es.meta["skipped"] + ds.skipped)[:10]:
        click.echo(f"  skipped {sid}: {why}", err=True)
    if summary["skipped"]:
        click.echo(f"  {summary['skipped']} skipped in all", err=True)


@click.command("encoders")
@click.option("--json", "as_json", is_flag=True)
def encoders_cli(as_json):
    """List the registered encoders (offline packages, HF prefixes, trained checkpoints)."""
    from captioner.encoders import list_encoders

    rows = list_encoders()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    w = max(len(r["name"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{w}}  {r['modality']:<6} {r['about']}")
