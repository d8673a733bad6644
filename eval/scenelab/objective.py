"""The scene lab's objectives with an unlimited encoder: where does each one's optimum lie?

``eval.scenelab.optimum.lookup_optimum`` trains the JEPA loss over a lookup table (one free vector per
latent scene: perfect perception, unlimited capacity) on the lab's own observation model. Two tables
from different random starts stand for two modalities that share the view kernel and nothing else. For
each regulariser this prints the held-out Procrustes residual and mutual 10-NN of each table against the
whitened latents (the theorem's answer) and of the two tables against each other; ``--from-latents`` also
starts a table at the latents to see whether the objective keeps them.

    python -m eval scenelab objective [--regs vicreg --regs sigreg] [--steps 2000] [--from-latents] [--json]

What it separates: a gap between the trained image and text JEPAs that the unlimited encoder does not
have is the encoders' (capacity, optimisation), not the objective's.
"""
from __future__ import annotations

import json
import time

import click


def per_attribute_reference_gap(k: int = 10) -> dict:
    """How far the whitened latents (``scenelab.latent_features``) are from the reference used before:
    the centred one-hots with equal variance per *attribute* (not per dimension). Residual and mutual k-NN
    of a perfect whitened embedding against that older reference."""
    import numpy as np

    from captioner.world import scenes as W
    from eval.scenelab import measures as M

    scenes = W.all_scenes()
    blocks = []
    for name, options in W.ATTRS.items():
        n = len(options)
        oh = np.array([[float(getattr(sc, name) == v) for v in options] for sc in scenes])
        blocks.append((oh - 1.0 / n) / np.sqrt((n - 1) / n))
    old = np.concatenate(blocks, 1)
    Z = W.latent_features(scenes)
    return {"residual": M.procrustes_residual(Z, old), "mutual_knn": M.mutual_knn(Z, old, k)}


def run(regs=("vicreg", "sigreg"), steps: int = 2000, reg_weight: float = 0.1, seeds=(0, 1),
        from_latents: bool = False, k: int = 10) -> dict:
    import torch

    from captioner.world import scenes as W
    from eval.scenelab import measures as M
    from eval.scenelab import optimum as O

    torch.set_num_threads(1)
    Z = W.latent_features(W.all_scenes())
    rows = []
    for reg in regs:
        t0 = time.time()
        tables = [O.lookup_optimum(reg, reg_weight, steps=steps, seed=s) for s in seeds]
        row = {"reg": reg, "reg_weight": reg_weight, "steps": steps,
               "residual_vs_latents": [M.procrustes_residual(X, Z) for X in tables],
               "mutual_knn_vs_latents": [M.mutual_knn(X, Z, k) for X in tables],
               "residual_between_starts": M.procrustes_residual(tables[0], tables[1]),
               "mutual_knn_between_starts": M.mutual_knn(tables[0], tables[1], k)}
        if from_latents:
            X = O.lookup_optimum(reg, reg_weight, steps=steps, seed=seeds[0], init="latents")
            row["residual_from_latents"] = M.procrustes_residual(X, Z)
        row["seconds"] = round(time.time() - t0, 1)
        rows.append(row)
    return {"rows": rows, "k": k, "seeds": list(seeds), "mutual_knn_ceiling": M.mutual_knn_ceiling(Z, k),
            "per_attribute_reference": per_attribute_reference_gap(k),
            "chance_mutual_knn": k / (len(Z) - 1)}


def table(res: dict) -> str:
    k = res["k"]
    lat = any("residual_from_latents" in r for r in res["rows"])
    head = (f"| regulariser | residual vs latents (per start) | mutual {k}-NN vs latents | residual between starts "
            f"| mutual {k}-NN between starts |" + (" residual, started at the latents |" if lat else "") + " s |")
    lines = [head, "|---|---|---|---|---|" + ("---|" if lat else "") + "---|"]
    for r in res["rows"]:
        cells = [r["reg"], " / ".join(f"{v:.3f}" for v in r["residual_vs_latents"]),
                 " / ".join(f"{v:.3f}" for v in r["mutual_knn_vs_latents"]),
                 f"{r['residual_between_starts']:.3f}", f"{r['mutual_knn_between_starts']:.3f}"]
        if lat:
            cells.append(f"{r['residual_from_latents']:.3f}" if "residual_from_latents" in r else "-")
        cells.append(f"{r['seconds']}")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(f"\nLookup-table encoders (unlimited capacity, perfect perception), starts {res['seeds']}; "
                 f"mutual {k}-NN ceiling {res['mutual_knn_ceiling']:.3f}, chance {res['chance_mutual_knn']:.3f}; "
                 "residual 0 = the same space up to a rotation.")
    if "per_attribute_reference" in res:
        g = res["per_attribute_reference"]
        lines.append(f"The whitened latents against the per-attribute reference of earlier releases: residual "
                     f"{g['residual']:.3f}, mutual {k}-NN {g['mutual_knn']:.3f}.")
    return "\n".join(lines)


@click.command("objective", help=__doc__)
@click.option("--regs", multiple=True, default=("vicreg", "sigreg"), show_default=True,
              type=click.Choice(["vicreg", "sigreg", "cov"]), help="repeatable")
@click.option("--steps", type=int, default=2000, show_default=True)
@click.option("--reg-weight", type=float, default=0.1, show_default=True)
@click.option("--from-latents", is_flag=True, help="also start a table at the latents")
@click.option("--json", "as_json", is_flag=True)
def cli(regs, steps, reg_weight, from_latents, as_json):
    res = run(tuple(regs), steps, reg_weight, from_latents=from_latents)
    print(table(res))
    if as_json:
        print(json.dumps(res, indent=2))
