"""``captioner eval coco`` and ``captioner eval zeroshot``: the product's evaluation (``captioner.evaluation``)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from captioner.captioners import captioner_names
from captioner.datasets import dataset_names
from captioner.evaluation.runs import ROTATION_CHOICES, ZEROSHOT_MODES, build_eval_pipeline, runs_dir


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
    from captioner.evaluation.coco import evaluate

    if results or annotations:
        _score_files_cli(results, annotations, meteor, spice, out, as_json)
        return

    world = _world_option(dataset, coco_root, world_seed, world_preset, split)
    pipe, test = build_eval_pipeline(coco_root, image_encoder, text_encoder, device, not quiet, beam,
                                     decoder_preset, train_limit, test_limit, pairfree_max, decode_input, world)
    out = Path(out) if out else runs_dir("eval-coco", f"{test.name}-{test.split}", f"{captioner}-{rotation}",
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
    from captioner.evaluation.coco import format_table

    if as_json:
        click.echo(json.dumps(res, indent=2))
        return True
    click.echo(format_table([res], title=title))
    for note in res["metrics"]["notes"]:
        click.echo(f"note: {note}")
    return False


def _score_files_cli(results, annotations, meteor, spice, out, as_json):
    from captioner.evaluation.coco import score_files
    from captioner.paths import atomic_write_json

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
    from captioner.evaluation.zeroshot import evaluate_zeroshot, format_table
    from captioner.paths import atomic_write_json
    from captioner.pipeline import Pipeline

    if dataset == "world":
        from captioner.evaluation.zeroshot import evaluate_world_zeroshot

        world = _world_option("world", root, world_seed, world_preset, split or "test")
        pipe, _ = build_eval_pipeline(progress=not quiet, world=world)
        res = evaluate_world_zeroshot(pipe, mode, split=world[2], seed=world_seed, prototypes=prototypes)
        name, prompts = f"world-s{world_seed}-{world[2]}", "world-words"
    else:
        pipe = Pipeline.default(image_encoder=image_encoder, text_encoder=text_encoder, device=device,
                                progress=not quiet)
        res = evaluate_zeroshot(pipe, dataset, mode, root=root, split=split, prompts=prompts, prototypes=prototypes)
        name = f"{res['dataset']}-{res['split']}"
    path = Path(out) if out else runs_dir("eval-zeroshot", name, f"{mode}-{prompts}" + ("-proto" if prototypes else ""),
                                           f"{pipe.image_encoder}--{pipe.text_encoder}") / "metrics.json"
    atomic_write_json(path, res)
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    click.echo(format_table(res if isinstance(res, list) else [res]))
    click.echo(f"metrics: {path}")
