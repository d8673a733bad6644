"""``captioner world``: the JEPA world end to end (train its encoders, report the pair-free chain)."""
from __future__ import annotations

import json

import click


@click.group()
def cli():
    """The JEPA world: JEPAs trained apart on its renders and captions, one rotation found with no pair,
    captions and zero-shot labels, official metrics."""


@cli.command("train")
@click.option("--preset", type=click.Choice(["smoke", "quick", "lab", "gpu"]), default="lab", show_default=True,
              help="smoke (4 steps per model: checks the command or a launch, not a usable world), quick (about a "
                   "minute: tests), lab (the scene lab's training, the text JEPA 3 times: ~15 min on 2 cores), "
                   "gpu (twice the scenes and steps: the device check)")
@click.option("--seed", type=int, default=0, show_default=True, help="world seed (scenes, training, init)")
@click.option("--device", default="cpu", show_default=True,
              help="cpu, or auto (accelerate takes the GPU when there is one), as `captioner train`")
@click.option("--json", "as_json", is_flag=True, help="print world.json")
@click.option("--quiet", is_flag=True, help="no progress bar")
def train_cli(preset, seed, device, as_json, quiet):
    """Train (or reuse, or resume) the world's image JEPA, text JEPA and next-token LM for one seed.

    Kept under $CAPTIONER_HOME/world/<preset>-s<seed>; a killed run resumes from its last checkpoint.
    They are then the encoders world-image-jepa, world-text-jepa, world-ntp, world-ntp-last and
    world-untrained (add ?seed=N&preset=P for another seed or preset)."""
    from captioner.world.models import world_dir
    from captioner.world.train import train_world

    meta = train_world(preset, seed, device=device, progress=not quiet)
    if as_json:
        click.echo(json.dumps(meta, indent=2))
        return
    click.echo(f"world {preset} seed {seed}: encoders in {world_dir(preset, seed)} ({meta['seconds']} s this call)")
    runs = (meta.get("restarts") or {}).get("text-jepa") or []
    if len(runs) > 1:   # which of the text JEPA's runs the registry loads, and why
        kept = meta["runs"]["text-jepa"]
        click.echo(f"  text JEPA: {len(runs)} runs (init seeds {', '.join(str(s) for s, _ in runs)}), final training "
                   f"loss {', '.join(f'{v:.4f}' for _, v in runs)}; kept the lowest: {kept}")


@cli.command("report")
@click.option("--preset", type=click.Choice(["quick", "lab", "gpu"]), default="lab", show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True, help="world seeds, comma-separated (each trained)")
@click.option("--text", "texts", default=None,
              help="text encoders, comma-separated (default all: text-jepa,ntp,ntp-last,untrained,minilm-l6)")
@click.option("--rotations", default=None,
              help="rotations, comma-separated (default all: paired,pairfree-disjoint,pairfree-same,pairfree-uniform,"
                   "lattice-disjoint,lattice-same,gw,random)")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="folder for results.json and world.md (default $CAPTIONER_HOME/world/report-<preset>)")
@click.option("--device", default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print results.json")
@click.option("--quiet", is_flag=True, help="no progress lines")
def report_cli(preset, seeds, texts, rotations, out, device, as_json, quiet):
    """The world's table: text encoder x rotation (paired, pair-free on disjoint or the same scenes, POT GW,
    random), with matcher accuracy, held-out residual, R@1, CIDEr x100 and zero-shot top-1, mean +- std
    over seeds, and the issue's targets. Each seed's rows are kept and reused while its models are."""
    from captioner.errors import CaptionerError
    from eval.world.chain import ROTATIONS, TEXT_ENCODERS
    from eval.world.table import world_report

    def listed(s, known, what):
        if s is None:
            return None
        got = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in got if x not in known]
        if bad or not got:
            raise CaptionerError(f"unknown {what} {bad[0] if bad else s!r}; choose from {', '.join(known)}")
        return got

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise CaptionerError(f"--seeds must be integers separated by commas, not {seeds!r}") from None
    res = world_report(preset, seed_list, out=out, device=device, progress=not quiet,
                       text_keys=listed(texts, TEXT_ENCODERS, "text encoder"),
                       rotation_keys=listed(rotations, ROTATIONS, "rotation"))
    from eval.world.table import format_table

    click.echo(json.dumps(res, indent=2) if as_json else format_table(res))


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
