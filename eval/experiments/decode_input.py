"""What should the Tux Paint decoder read, per rotation: DeCap's projection or the rotated query itself?

For each rotation the decoder captions the split's images twice: from DeCap's projection of the rotated query
onto the bank (softmax temperature ``Pipeline.temperature``, 0.03) and from the rotated query itself at a
caption's radius (``captioner.retrieval.onto_manifold``). It prints CIDEr (x100, pycocoevalcap) of the
captions as the pipeline returns them (``captioner.pipeline_decoder.drop_prompt_template`` applied) and with
the class-name prompt's template ("a photo of a ...") kept, so the two parts of a gain can be told apart.
``captioner.pipeline_decoder.AUTO_DECODE_INPUT`` is chosen from the val split (the default); ``--split
test`` measures the choice once. On val the decoder is trained without the val captions (the pipeline's own
corpus holds them), so a val run trains a decoder of its own on first use (about 2 minutes).

    python -m eval experiment decode-input [--split val|test] [--json] [--out FILE]
"""
from __future__ import annotations

import time

import click

from eval.experiments import emit, held_out_captions

ROTATIONS = ("paired", "head", "pairfree", "ridge")
INPUTS = ("projection", "rotation")


def run(split: str = "val", image_encoder: str = "efficientnet-lite0", text_encoder: str = "minilm-l6") -> dict:
    from captioner.cache import embed
    from captioner.datasets import get_dataset
    from captioner.evaluation.coco import cider_x100, references, tokenize
    from captioner.pipeline import Pipeline
    from captioner.pipeline_decoder import AUTO_DECODE_INPUT, drop_prompt_template

    t0 = time.time()
    ds = get_dataset("tuxpaint", split)
    # scoring val, its captions leave the decoder corpus too, or the decoder could spell out its own references
    pipe = Pipeline(image_encoder, text_encoder, progress=False, exclude=held_out_captions(split))
    refs = references(ds)
    xs = embed(pipe.encoder("image"), ds, "image", progress=False)
    ids = list(xs.sample_ids)
    dec = pipe.decoder()
    raw = {}
    for rot in ROTATIONS:
        Q = pipe.text_queries(xs.X, rot)
        for how in INPUTS:
            pipe.decode_input = how
            raw[(rot, how)] = dec.generate(pipe.decoder_inputs(Q, rot), beam=pipe.beam)
    texts = sorted({c for caps in raw.values() for c in caps} | {drop_prompt_template(c) for caps in raw.values()
                                                                   for c in caps} | {r for k in ids for r in refs[k]})
    tok = tokenize({i: [t] for i, t in enumerate(texts)})
    index = {t: tok[i][0] for i, t in enumerate(texts)}
    tref = {k: [index[r] for r in refs[k]] for k in ids}
    rows = []
    for (rot, how), caps in raw.items():
        kept = cider_x100({k: index[c] for k, c in zip(ids, caps)}, tref)
        dropped = cider_x100({k: index[drop_prompt_template(c)] for k, c in zip(ids, caps)}, tref)
        rows.append({"rotation": rot, "input": how, "cider_x100": dropped, "cider_x100_template_kept": kept,
                     "auto": AUTO_DECODE_INPUT.get(rot, "projection") == how,
                     "examples": [drop_prompt_template(c) for c in caps[:3]]})
    return {"split": split, "n_images": len(ids), "image_encoder": image_encoder, "text_encoder": text_encoder,
            "temperature": pipe.temperature, "rows": rows, "seconds": round(time.time() - t0, 1)}


def table(res: dict) -> str:
    lines = [f"Tux Paint {res['split']} ({res['n_images']} images), decoder captioner, {res['image_encoder']} -> "
             f"{res['text_encoder']}; CIDEr x100", "",
             "| rotation | decoder reads | CIDEr (as returned) | CIDEr (template kept) | auto's choice | examples |",
             "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['rotation']} | {r['input']} | {r['cider_x100']:.1f} | {r['cider_x100_template_kept']:.1f} | "
                     f"{'yes' if r['auto'] else ''} | {' / '.join(r['examples'])} |")
    return "\n".join(lines)


@click.command("decode-input", help=__doc__)
@click.option("--split", default="val", show_default=True, type=click.Choice(("val", "test")))
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True)
@click.option("--text-encoder", default="minilm-l6", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print only the JSON")
@click.option("--out", default=None, help="also write the JSON here")
def cli(split, image_encoder, text_encoder, as_json, out):
    res = run(split, image_encoder, text_encoder)
    emit(res, out, as_json, table(res))
