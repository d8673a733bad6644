"""The results table for the README: every captioner x rotation on the embedded Tux Paint test split, the
text-only ceiling, and zero-shot accuracy, as Markdown and JSON (written atomically)."""
from __future__ import annotations

import time
from pathlib import Path

from captioner.paths import atomic_write_bytes, atomic_write_json
from captioner.rotations import ALL as ROTATIONS
from captioner.rotations import label as rotation_label
from captioner.tables import markdown_table

TEXT_CEILING_LABEL = "text-only ceiling (reference caption embedding as query)"
CAPTIONER_LABELS = {"retrieval": "retrieval", "decoder": "projection + decoder",
                    "decoder-direct": "decoder, direct input (no projection)"}


def build_report(pipe, test_set, out_dir, meteor: bool = True, progress: bool = True,
                 rotations=(*ROTATIONS, "text"), captioners=("retrieval", "decoder"),
                 zeroshot_modes=(*ROTATIONS, "cluster"),
                 ) -> dict:
    """Run the evaluations and write ``report.md`` and ``report.json`` under ``out_dir``.

    Returns {"markdown": str, "json": dict, "files": {"markdown", "json"}}.
    """
    import sys

    from captioner.evaluation.coco import evaluate
    from captioner.evaluation.zeroshot import evaluate_zeroshot

    out_dir = Path(out_dir)
    t0 = time.time()
    rows = []
    for cap in captioners:
        for rot in rotations:
            if progress:
                print(f"[report] {cap} / {rot}", file=sys.stderr, flush=True)
            r = evaluate(pipe, test_set, rotation=rot, captioner=cap, meteor=meteor,
                         out_dir=out_dir / "runs" / f"{cap}-{rot}")
            if cap == "decoder" and pipe.decode_input_for(rot) == "rotation":
                r["captioner"] = "decoder-direct"        # decode_input "auto": this rotation's query is read as is
            rows.append(r)
    if "decoder" in captioners and "text" in rotations:
        # The decoder's own ceiling: the reference caption's embedding fed to it directly (no projection onto
        # the bank): how well it reconstructs captions it never saw, i.e. what a perfect rotation would give.
        import copy

        direct = copy.copy(pipe)
        direct.decode_input = "rotation"
        r = evaluate(direct, test_set, rotation="text", captioner="decoder", meteor=meteor,
                     out_dir=out_dir / "runs" / "decoder-direct-text", name="decoder-direct-text")
        r["captioner"] = "decoder-direct"
        rows.append(r)
    zs = []
    for mode in zeroshot_modes:
        if progress:
            print(f"[report] zero-shot {mode}", file=sys.stderr, flush=True)
        zs.append(evaluate_zeroshot(pipe, "tuxpaint", mode))
    pf = pipe.rotation("pairfree").meta.get("pairfree", {})
    data = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.time() - t0, 1),
        "image_encoder": pipe.image_encoder, "text_encoder": pipe.text_encoder,
        "test_set": f"{test_set.name}/{test_set.split}", "n_test_images": len(test_set), "bank_size": len(pipe.bank()),
        "decoder": {"preset": pipe.decoder_preset, "beam": pipe.beam, "input": pipe.decode_input,
                    "input_by_rotation": {r: pipe.decode_input_for(r) for r in rotations},
                    "temperature": pipe.temperature},
        "pairfree_match": pf,
        "scales": "BLEU/METEOR/ROUGE-L/SPICE: 0-1 in JSON, x100 in the table; CIDEr: 'CIDEr' on pycocoevalcap's "
                  "0-10 scale, 'CIDEr_x100' on the papers' scale",
        "captioning": [{k: r[k] for k in ("name", "captioner", "rotation", "metrics", "bank_size", "n_skipped")}
                       for r in rows],
        "zeroshot": zs,
    }
    md = format_markdown(data)
    atomic_write_json(out_dir / "report.json", data)
    atomic_write_bytes(out_dir / "report.md", md.encode())
    return {"markdown": md, "json": data, "files": {"markdown": str(out_dir / "report.md"),
                                                     "json": str(out_dir / "report.json")}}


def format_markdown(data: dict) -> str:
    def pct(v):
        return "-" if v is None else f"{100 * v:.1f}"

    lines = [f"## Results on {data['test_set']} ({data['n_test_images']} images; bank: {data['bank_size']} train "
             f"captions; {data['image_encoder']} -> {data['text_encoder']})", "",
             "Captioning (BLEU, METEOR, ROUGE-L x100; CIDEr on pycocoevalcap's 0-10 scale and x100 as in papers; "
             "one reference caption per image):", "",
             markdown_table(["captioner", "rotation", "B@1", "B@4", "METEOR", "ROUGE-L", "CIDEr (0-10)", "CIDEr (x100)"],
                            [[CAPTIONER_LABELS.get(r["captioner"], r["captioner"]),
                              TEXT_CEILING_LABEL if r["rotation"] == "text" else rotation_label(r["rotation"]),
                              pct(m["BLEU-1"]), pct(m["BLEU-4"]), pct(m.get("METEOR")), pct(m["ROUGE-L"]),
                              f"{m['CIDEr']:.3f}", f"{m['CIDEr_x100']:.1f}"]
                             for r in data["captioning"] for m in [r["metrics"]]], compact=True)]
    notes = sorted({n for r in data["captioning"] for n in r["metrics"].get("notes", [])})
    lines += [""] + [f"Note: {n}." for n in notes]
    lines += ["", "Zero-shot classification of the Tux Paint categories (80 ImageNet templates per class, mean "
              "embedding renormalised):", "",
              markdown_table(["mode", "pairs used", "top-1 %", "top-5 %", "chance top-1 %", "majority class %"],
                             [[z["mode"], z["pairing"], pct(z["top1"]), pct(z["top5"]), pct(z["chance_top1"]),
                               pct(z["majority_top1"])] for z in data["zeroshot"]], compact=True)]
    d = data["decoder"]
    lines += ["", f"Decoder: preset {d['preset']}, beam {d['beam']}, input = {d['input']} (temperature "
              f"{d['temperature']}). Reproduce: `python -m eval report` ({data['seconds']:.0f} s here)."]
    return "\n".join(lines) + "\n"
