"""Can the world's attributes be estimated when the JEPAs embed in a space wider than the lattice (issue 40)?
Trains (or reuses) a world of ``--preset`` (default ``ci32``: the ci world with 32-d embeddings) on the
seed's train scenes, embeds the disjoint setting's renders and captions, and prints each side's leading
covariance eigenvalues (relative to the first), the lattice dimension ``alignment.lattice_cards.lattice_dimension``
reads off them and the cards ``estimate_cards`` returns, against the world's 6,3,3,3,2.

    python -m eval experiment world-wide [--preset ci32] [--seed 0] [--json]
"""
from __future__ import annotations

import click
import numpy as np

from eval.experiments import emit


def run(preset: str = "ci32", seed: int = 0) -> dict:
    from alignment.lattice_cards import estimate_cards, lattice_dimension
    from captioner.world.scenes import ATTRS
    from captioner.world.setting import setting
    from captioner.world.train import train_world
    from eval.world.chain import embed, world_name

    meta = train_world(preset, seed, progress=False, scenes="train")
    st = setting(seed)
    sides = {"images": ("world-image-jepa", [st.train.samples[i].source() for i in st.disjoint_images]),
             "captions": ("world-text-jepa", [st.bank[j] for j in st.disjoint_captions])}
    out = {"preset": preset, "seed": seed, "embed_dim": meta["config"]["embed_dim"],
           "world_cards": sorted((len(v) for v in ATTRS.values()), reverse=True), "sides": {}}
    for side, (name, items) in sides.items():
        Z = embed(world_name(name, preset, seed, "train"), items)
        d, ev = lattice_dimension(Z, Z.shape[1])
        cards, info = estimate_cards(Z)
        out["sides"][side] = {"eigenvalues": np.round(ev[:20] / ev[0], 3).tolist(), "lattice_dim": int(d),
                              "searched_dim": int(info["dim"]), "cards": list(cards)}
    return out


def table(res: dict) -> str:
    lines = [f"world {res['preset']} seed {res['seed']}, {res['embed_dim']}-d JEPAs; the world's cards "
             f"{','.join(map(str, res['world_cards']))}", "",
             "| side | leading eigenvalues / first | gap-read dimension | searched | cards estimated |",
             "|---|---|---:|---:|---|"]
    for side, s in res["sides"].items():
        lines.append(f"| {side} | {', '.join(f'{v:.2f}' for v in s['eigenvalues'][:14])} | {s['lattice_dim']} | "
                     f"{s['searched_dim']} | {','.join(map(str, s['cards']))} |")
    return "\n".join(lines)


@click.command("world-wide", help=__doc__)
@click.option("--preset", default="ci32", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", default=None, help="write the JSON here")
@click.option("--json", "json_only", is_flag=True)
def cli(preset, seed, out, json_only):
    res = run(preset, seed)
    emit(res, out, json_only, table(res))
