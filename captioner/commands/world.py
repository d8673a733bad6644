"""``captioner world``: the JEPA world's encoders (``train``) and renders of its scenes (``renders``); its report
(the pair-free chain's table) is an experiment: ``python -m eval world report``."""
from __future__ import annotations

import json

import click

from captioner.world.models import PRESETS


@click.group()
def cli():
    """The JEPA world: JEPAs trained apart on its renders and captions, one rotation found with no pair,
    captions and zero-shot labels, official metrics."""


@cli.command("train")
@click.option("--preset", type=click.Choice(list(PRESETS)), default="lab", show_default=True,
              help="smoke (4 steps per model: checks the command or a launch, not a usable world), quick (about a "
                   "minute: tests, not an aligned world), ci (~2 min: the smallest world that aligns, the headline "
                   "test), lab (the scene lab's training, every model 3 times: ~20 min on 2 cores), gpu (twice the "
                   "scenes and steps: the device check)")
@click.option("--seed", type=int, default=0, show_default=True, help="world seed (scenes, training, init)")
@click.option("--device", default="cpu", show_default=True,
              help="cpu, or auto (accelerate takes the GPU when there is one), as `captioner train`")
@click.option("--scenes", type=click.Choice(["all", "train"]), default="all", show_default=True,
              help="the scenes the encoders train on: all 324, or only the seed's train scenes (its val and test "
                   "scenes then unseen compositions; kept in <preset>-s<seed>-train, encoders named &scenes=train)")
@click.option("--json", "as_json", is_flag=True, help="print world.json")
@click.option("--quiet", is_flag=True, help="no progress bar")
def train_cli(preset, seed, device, scenes, as_json, quiet):
    """Train (or reuse, or resume) the world's image JEPA, text JEPA and next-token LM for one seed.

    Kept under $CAPTIONER_HOME/world/<preset>-s<seed>; a killed run resumes from its last checkpoint.
    They are then the encoders world-image-jepa, world-text-jepa, world-ntp, world-ntp-last and
    world-untrained (add ?seed=N&preset=P for another seed or preset)."""
    from captioner.world.models import world_dir
    from captioner.world.train import train_world

    meta = train_world(preset, seed, device=device, progress=not quiet, scenes=scenes)
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    click.echo(f"world {preset} seed {seed}: encoders in {world_dir(preset, seed, scenes)} ({meta['seconds']} s this call)")
    labels = {"image-jepa": "image JEPA", "text-jepa": "text JEPA", "ntp": "next-token LM"}
    for kind, runs in (meta.get("restarts") or {}).items():
        if len(runs) > 1:   # which of the runs the registry loads, and why
            kept = meta["runs"][kind]
            click.echo(f"  {labels.get(kind, kind)}: {len(runs)} runs (init seeds {', '.join(str(s) for s, _ in runs)}), "
                       f"final training loss {', '.join(f'{v:.4f}' for _, v in runs)}; kept the lowest: {kept}")


@cli.command("renders")
@click.option("--seed", type=int, default=0, show_default=True, help="world seed (its scene splits)")
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--n", "count", type=click.IntRange(1), default=3, show_default=True, help="renders to write")
@click.option("--start", type=click.IntRange(0), default=0, show_default=True, help="first sample index")
@click.option("--out", type=click.Path(file_okay=False), default=".", show_default=True, help="folder for the PNGs")
def renders_cli(seed, split, count, start, out):
    """Write renders of the world's scenes as PNG files (32 px, as the image JEPA sees them) and print each
    file's scene and its first true caption: images to try `captioner caption|classify --world SEED` on."""
    from pathlib import Path

    from captioner.datasets import get_dataset
    from captioner.errors import CaptionerError

    ds = get_dataset("world", split, seed=seed)
    if start >= len(ds):
        raise CaptionerError(f"--start {start}: the world's {split} split of seed {seed} has {len(ds)} renders")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for s in ds.samples[start:start + count]:
        path = folder / f"{s.id}.png"
        s.source().save(path)
        click.echo(f"{path}: {s.label} | {s.captions[0]}")
