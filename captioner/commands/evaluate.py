"""``captioner eval coco``, ``captioner eval zeroshot`` and ``captioner report``."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from captioner.captioners import captioner_names
from captioner.datasets import dataset_names
from captioner.errors import CaptionerError
from captioner.rotations import ALL as ROTATIONS

# ``text`` is no rotation: the text-only ceiling (each image's own reference caption embedding as the query)
ROTATION_CHOICES = [*ROTATIONS, "text"]
ZEROSHOT_MODES = [*ROTATIONS, "cluster"]  # cluster: k-means + QAP, no rotation (Blind Match)


def _subset(ds, n: int | None, seed: int = 0):
    """The first ``n`` samples of ``ds`` after a seeded shuffle (a new split name, so caches stay apart)."""
    if not n or n >= len(ds):
        return ds
    import numpy as np

    from captioner.datasets import CaptionDataset

    order = np.random.default_rng(seed).permutation(len(ds))[:n]
    return CaptionDataset(ds.name, f"{ds.split}-sub{n}-s{seed}", [ds.samples[i] for i in sorted(order)],
                          labels=ds.labels, root=ds.root, skipped=ds.skipped)


def build_eval_pipeline(coco_root=None, image_encoder="efficientnet-lite0", text_encoder="minilm-l6", device="cpu",
                        progress=True, beam=1, decoder_preset=None, train_limit=20000, test_limit=None,
                        pairfree_max=2000, decode_input="auto", world=None):
    """(Pipeline, test set) for the embedded Tux Paint test split, or the COCO Karpathy test split under
    ``coco_root`` (bank, pairs and decoder corpus from the Karpathy train split, at most ``train_limit``
    images), or with ``world=(preset, seed, split)`` the JEPA world's ``split`` through the world's own
    pipeline (``captioner.world.demo.world_pipeline``: its image and text JEPAs, its train captions as the
    bank, the lattice matcher's pair-free map, the world's decoder reading the rotated render)."""
    from captioner.datasets import get_dataset
    from captioner.pipeline import Pipeline

    if world is not None:
        from captioner.world.demo import world_pipeline

        preset, seed, split = world
        if split == "train":
            raise CaptionerError("--split train: the world's train split is its bank and its pairs; "
                                 "evaluate on val or test")
        return world_pipeline(preset, seed, progress), _subset(get_dataset("world", split, seed=seed), test_limit)
    preset = decoder_preset or ("base" if str(device).startswith("cuda") else "small")
    kw = dict(image_encoder=image_encoder, text_encoder=text_encoder, device=device, progress=progress, beam=beam,
              decoder_preset=preset, pairfree_max=pairfree_max, decode_input=decode_input)
    if coco_root is None:
        test = get_dataset("tuxpaint", split="test")
        return Pipeline.default(**kw), test
    root = Path(coco_root)
    if not root.exists():
        raise CaptionerError(f"--coco-root {root}: no such folder (expected dataset_coco.json and the images)")
    test = _subset(get_dataset("coco", split="test", root=root), test_limit)
    train = _subset(get_dataset("coco", split="train", root=root), train_limit)
    pipe = Pipeline(train_set=train, exclude=test.captions(), decoder_corpus="bank", **kw)
    return pipe, test


def _runs_dir(*parts) -> Path:
    import re

    from captioner.paths import subdir

    return subdir("runs").joinpath(*[re.sub(r"[/:?&=]", "_", p) for p in parts])


@click.group("eval")
def cli():
    """Evaluate captions (COCO metrics) and zero-shot accuracy."""


@cli.command("coco")
@click.option("--rotation", "-r", type=click.Choice(ROTATION_CHOICES), default="paired", show_default=True,
              help="text = the text-only ceiling (each image's own reference caption embedding as the query).")
@click.option("--captioner", "-c", type=click.Choice(captioner_names(uses_rotation=True)), default="retrieval",
              show_default=True, help="decoder = the text-only decoder, reading DeCap's projection onto the bank (the head map: its "
                   "rotated query; see --decode-input).")
@click.option("--coco-root", type=click.Path(), default=None,
              help="COCO folder with dataset_coco.json (Karpathy split) and the images; default: Tux Paint test.")
@click.option("--dataset", "-d", type=click.Choice(dataset_names("coco")), default="tuxpaint", show_default=True,
              help="world: the JEPA world's held-out scenes, with its trained JEPAs (`captioner world train`) in place "
                   "of the encoder options.")
@click.option("--world-seed", default=0, show_default=True, help="--dataset world: the world seed.")
@click.option("--world-preset", default=None, help="--dataset world: the trained world's preset (default: lab, "
              "else whichever is trained for the seed).")
@click.option("--split", type=click.Choice(["val", "test"]), default="test", show_default=True,
              help="--dataset world: the held-out split scored.")
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--beam", default=1, show_default=True, type=click.IntRange(1, 16), help="1 = greedy.")
@click.option("--decode-input", type=click.Choice(["auto", "projection", "rotation"]), default="auto", show_default=True,
              help="what the decoder reads: DeCap's projection, the rotated query, or per rotation (auto: the head "
                   "map reads its query, chosen on Tux Paint val)")
@click.option("--decoder-preset", default=None, help="tiny, small, base (default: small on CPU, base on CUDA).")
@click.option("--train-limit", default=20000, show_default=True, help="COCO: train images for pairs and bank.")
@click.option("--test-limit", default=None, type=int, help="COCO: score only this many test images.")
@click.option("--pairfree-max", default=2000, show_default=True)
@click.option("--meteor/--no-meteor", default=True, show_default=True, help="METEOR starts a 2 GB JVM (~10 s).")
@click.option("--spice", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(), default=None, help="Results folder (default under $CAPTIONER_HOME/runs).")
@click.option("--results", type=click.Path(), default=None,
              help="Score this COCO results file ([{image_id, caption}], any captioner's) instead of captioning; "
                   "needs --annotations.")
@click.option("--annotations", type=click.Path(), default=None,
              help="With --results: the COCO captions file (captions_<split>.json) holding the references.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
@click.option("--quiet", "-q", is_flag=True)
def coco_cli(rotation, captioner, coco_root, dataset, world_seed, world_preset, split, image_encoder, text_encoder, device,
             beam, decode_input, decoder_preset, train_limit, test_limit, pairfree_max, meteor, spice, out, results,
             annotations, as_json, quiet):
    """Caption the evaluation split, write the predictions in the COCO results format
    ([{"image_id", "caption"}]) and score them with pycocoevalcap: BLEU-1..4, METEOR, ROUGE-L, CIDEr
    (0-10 as pycocoevalcap gives it, and x100 as papers print it), SPICE only when its jars are present.

    With --results FILE --annotations FILE: score those predictions (yours or any system's) instead;
    the metrics go to --out (a JSON file) only when scoring succeeded."""
    from eval.coco import evaluate

    if results or annotations:
        _score_files_cli(results, annotations, meteor, spice, out, as_json)
        return

    world = _world_option(dataset, coco_root, world_seed, world_preset, split)
    pipe, test = build_eval_pipeline(coco_root, image_encoder, text_encoder, device, not quiet, beam,
                                     decoder_preset, train_limit, test_limit, pairfree_max, decode_input, world)
    out = Path(out) if out else _runs_dir("eval-coco", f"{test.name}-{test.split}", f"{captioner}-{rotation}",
                                          f"{pipe.image_encoder}--{pipe.text_encoder}")
    res = evaluate(pipe, test, rotation=rotation, captioner=captioner, out_dir=out, meteor=meteor, spice=spice)
    if not _show(res, as_json, f"{test.name}/{test.split}: {captioner}, rotation {rotation}"):
        click.echo(f"results: {res['files']['results']}")


def _world_option(dataset, coco_root, seed, preset, split):
    """(preset, seed, split) for ``--dataset world`` (None otherwise), refusing options that do not go with it."""
    if dataset != "world":
        if split != "test":
            raise click.UsageError("--split goes with --dataset world (Tux Paint and COCO score their test split)")
        return None
    if coco_root:
        raise click.UsageError("--dataset world takes no dataset folder (--coco-root / --root)")
    from captioner.world.models import default_preset

    return preset or default_preset(seed), seed, split


def _show(res: dict, as_json: bool, title: str) -> bool:
    """Print one scored run as JSON or as a table with its notes; True when JSON was printed."""
    from eval.coco import format_table

    if as_json:
        click.echo(json.dumps(res, indent=2))
        return True
    click.echo(format_table([res], title=title))
    for note in res["metrics"]["notes"]:
        click.echo(f"note: {note}")
    return False


def _score_files_cli(results, annotations, meteor, spice, out, as_json):
    from captioner.paths import atomic_write_json
    from eval.coco import score_files

    if not (results and annotations):
        raise click.UsageError("--results and --annotations go together (predictions and their references)")
    res = score_files(results, annotations, meteor=meteor, spice=spice)
    if out:
        atomic_write_json(Path(out), res)
    _show(res, as_json, f"{results} against {annotations}")


@cli.command("zeroshot")
@click.option("--dataset", "-d", type=click.Choice(dataset_names("zeroshot")), default="tuxpaint",
              show_default=True, help="world: each attribute of the JEPA world's held-out renders, with its trained "
                                      "JEPAs in place of the encoder options.")
@click.option("--root", type=click.Path(), default=None, help="ImageNet-100 folder (<split>/<wnid>/*.JPEG).")
@click.option("--split", default=None, help="Default: test (tuxpaint, world), val (imagenet100).")
@click.option("--world-seed", default=0, show_default=True, help="--dataset world: the world seed.")
@click.option("--world-preset", default=None, help="--dataset world: the trained world's preset (default: lab, "
              "else whichever is trained for the seed).")
@click.option("--mode", "-m", type=click.Choice(ZEROSHOT_MODES),
              default="paired", show_default=True,
              help="pairfree: the pair-free rotation; head: the classifier-head pseudo-pair rotation (no pairs); "
                   "cluster: k-means + QAP, no rotation (Blind Match).")
@click.option("--prompts", type=click.Choice(["templates", "definitions", "both", "captions"]), default="templates",
              show_default=True, help="definitions: WordNet glosses (ImageNet-100 only); captions: the templates "
              "plus the train split's captions of each category (Tux Paint; text only, no image read).")
@click.option("--prototypes", is_flag=True, help="Add class prototypes in image space, found on the train "
              "split's images with no label or caption (captioner.zeroshot.PrototypeClassifier; the world's "
              "report scores both ways).")
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--out", type=click.Path(), default=None)
@click.option("--json", "as_json", is_flag=True)
@click.option("--quiet", "-q", is_flag=True)
def zeroshot_cli(dataset, root, split, world_seed, world_preset, mode, prompts, prototypes, image_encoder, text_encoder,
                 device, out, as_json, quiet):
    """Zero-shot top-1 / top-5 accuracy: classes are the mean of their template prompts, renormalised; images
    are rotated into text space (paired / pairfree / head / ridge / random) or matched by clusters (cluster)."""
    from captioner.paths import atomic_write_json
    from captioner.pipeline import Pipeline
    from eval.zeroshot import evaluate_zeroshot, format_table

    if dataset == "world":
        from eval.zeroshot import evaluate_world_zeroshot

        world = _world_option("world", root, world_seed, world_preset, split or "test")
        pipe, _ = build_eval_pipeline(progress=not quiet, world=world)
        res = evaluate_world_zeroshot(pipe, mode, split=world[2], seed=world_seed, prototypes=prototypes)
        name, prompts = f"world-s{world_seed}-{world[2]}", "world-words"
    else:
        pipe = Pipeline.default(image_encoder=image_encoder, text_encoder=text_encoder, device=device,
                                progress=not quiet)
        res = evaluate_zeroshot(pipe, dataset, mode, root=root, split=split, prompts=prompts, prototypes=prototypes)
        name = f"{res['dataset']}-{res['split']}"
    path = Path(out) if out else _runs_dir("eval-zeroshot", name, f"{mode}-{prompts}" + ("-proto" if prototypes else ""),
                                           f"{pipe.image_encoder}--{pipe.text_encoder}") / "metrics.json"
    atomic_write_json(path, res)
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    click.echo(format_table(res if isinstance(res, list) else [res]))
    click.echo(f"metrics: {path}")


@click.command("report")
@click.option("--out", type=click.Path(), default=None, help="Folder for report.md and report.json "
              "(default $CAPTIONER_HOME/runs/report).")
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--meteor/--no-meteor", default=True, show_default=True)
@click.option("--decoder-preset", default=None, help="tiny, small, base (default: small on CPU, base on CUDA).")
@click.option("--rotations", default=",".join(ROTATION_CHOICES), show_default=True,
              help="Comma-separated rotations (text = the text-only ceiling).")
@click.option("--captioners", default="retrieval,decoder", show_default=True)
@click.option("--zeroshot-modes", default=",".join(ZEROSHOT_MODES), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON instead of the Markdown.")
@click.option("--quiet", "-q", is_flag=True)
def report_cli(out, image_encoder, text_encoder, device, meteor, decoder_preset, rotations, captioners,
               zeroshot_modes, as_json, quiet):
    """Write the results table (Markdown + JSON) on the embedded Tux Paint test split: each captioner
    (retrieval; decoder, reading DeCap's projection or, for the head map, its query) x rotation (paired Procrustes, pair-free, ridge, random), the
    text-only ceiling, and zero-shot accuracy on the Tux Paint categories."""
    from eval.report import build_report

    pipe, test = build_eval_pipeline(None, image_encoder, text_encoder, device, not quiet,
                                     decoder_preset=decoder_preset)
    out = Path(out) if out else _runs_dir("report")
    t0 = time.time()
    def names(v, allowed, what):
        got = [x.strip() for x in v.split(",") if x.strip()]
        bad = [x for x in got if x not in allowed]
        if bad:
            raise click.BadParameter(f"unknown {what} {bad[0]!r}; choose from {', '.join(allowed)}")
        return tuple(got)

    rep = build_report(pipe, test, out, meteor=meteor, progress=not quiet,
                       rotations=names(rotations, ROTATION_CHOICES, "rotation"),
                       captioners=names(captioners, ("retrieval", "decoder"), "captioner"),
                       zeroshot_modes=names(zeroshot_modes, ZEROSHOT_MODES, "zero-shot mode"))
    if as_json:
        click.echo(json.dumps(rep["json"], indent=2))
        return
    click.echo(rep["markdown"])
    from eval.world.table import world_section

    world = world_section()   # the JEPA world's table, when `captioner world report` has made one
    if world:
        (out / "world.md").write_text(world + "\n")
        click.echo("\n" + world)
    click.echo(f"\nwritten: {rep['files']['markdown']} and {rep['files']['json']} ({time.time() - t0:.0f} s)")
