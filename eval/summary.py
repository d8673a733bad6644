"""One readable table of the runs `make eval` wrote: rotation x metric (CIDEr on both scales, BLEU-4, METEOR,
zero-shot top-1 / top-5 with chance), from the ``metrics.json`` files under ``$CAPTIONER_HOME/runs``; the rows
also go to a JSON file.

    python -m eval summary [--runs DIR] [--out FILE]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from captioner.tables import markdown_table


def collect(runs: Path, dataset: str = "tuxpaint-test") -> list[dict]:
    """Rows {rotation, captioner, CIDEr, CIDEr_x100, BLEU-4, METEOR, zs_top1, zs_top5, chance_top1, chance_top5}
    from eval-coco/<dataset>/<captioner>-<rotation>/*/metrics.json and eval-zeroshot/<dataset>/<mode>-templates."""
    rows: dict = {}
    for f in sorted((runs / "eval-coco" / dataset).glob("*/*/metrics.json")):
        m = json.loads(f.read_text())
        r = rows.setdefault(m["rotation"], {"rotation": m["rotation"]})
        r[f"{m['captioner']}"] = {k: m["metrics"].get(k) for k in ("CIDEr", "CIDEr_x100", "BLEU-4", "METEOR")}
    for f in sorted((runs / "eval-zeroshot" / dataset).glob("*-templates/*/metrics.json")):
        m = json.loads(f.read_text())
        r = rows.setdefault(m["mode"], {"rotation": m["mode"]})
        r["zeroshot"] = {k: m.get(k) for k in ("top1", "top5", "chance_top1", "chance_top5", "n_classes")}
    return list(rows.values())


def table(rows: list[dict]) -> str:
    def f(v, scale=1.0, nd=1):
        return "-" if v is None else f"{v * scale:.{nd}f}"

    head = ["rotation", "CIDEr (0-10)", "CIDEr (x100)", "BLEU-4 (x100)", "METEOR (x100)", "zero-shot top-1", "top-5",
            "chance top-1 / top-5"]
    body = []
    for r in rows:
        c = r.get("retrieval", {})
        z = r.get("zeroshot", {})
        body.append([r["rotation"], f(c.get("CIDEr"), nd=3), f(c.get("CIDEr_x100")), f(c.get("BLEU-4"), 100),
                     f(c.get("METEOR"), 100), f(z.get("top1"), nd=3), f(z.get("top5"), nd=3),
                     f"{f(z.get('chance_top1'), nd=3)} / {f(z.get('chance_top5'), nd=3)}"])
    return markdown_table(head, body, compact=True)


@click.command("summary", help=__doc__)
@click.option("--runs", default=None, help="default: $CAPTIONER_HOME/runs")
@click.option("--out", default=None, help="default: <runs>/summary.json")
@click.pass_context
def cli(ctx, runs, out):
    from captioner.paths import atomic_write_json, home

    runs = Path(runs) if runs else home() / "runs"
    rows = collect(runs)
    if not rows:
        print(f"no eval runs under {runs}; run `make eval` first", file=sys.stderr)
        ctx.exit(1)
    out = Path(out) if out else runs / "summary.json"
    atomic_write_json(out, {"dataset": "tuxpaint/test", "captioner": "retrieval", "rows": rows})
    print("Tux Paint test split, retrieval captioner (CIDEr on pycocoevalcap's 0-10 scale and x100 as in papers)")
    print(table(rows))
    print(f"written: {out}")
    return 0
