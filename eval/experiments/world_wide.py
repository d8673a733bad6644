"""Can the world's attributes be estimated when the JEPAs embed in a space wider than the lattice (issue 40)?
Trains (or reuses) a world of ``--preset`` (default ``ci32``: the ci world with 32-d embeddings) on the
seed's train scenes, embeds the disjoint setting's renders and captions, and prints each side's leading
covariance eigenvalues (relative to the first), the lattice dimension ``alignment.lattice_cards.lattice_dimension``
reads off them and the cards ``estimate_cards`` returns, against the world's 6,3,3,3,2. Two diagnostics beside
them: how additive the cloud is (R^2 of its scene means under the additive model on the *true* labels: read
here, never given to the estimate; in the whole space and inside the subspace the fitted model spans), and the view subspace (``alignment.lattice_cards.view_basis``, ``estimate_cards(views=...)``:
the directions along which one view of a training scene predicts another in the same modality, no cross-modal
pair; single attributes should have eigenvalue ~(1 - CORRUPT)^2, products of two its square), its size read at
the largest eigenvalue ratio among the leading 24 and the cards estimated inside it. The last column estimates
the cards the same way from the modality's own training corpus (both views of its first 3,000 training draws,
over all the seed's train scenes) instead of the disjoint setting's cloud (56-89 of them): still no cross-modal
pair and nothing from the world's definition. The column after it: the same estimate in the true lattice
subspace (the span of the additive model fitted on the true labels: a diagnostic), on the cloud and the corpus.

    python -m eval experiment world-wide [--preset ci32] [--seeds 0,1,2] [--out F.json] [--json]

With several seeds, a last line counts the sides (2 a seed) whose cards were right: from the cloud alone, in the
view subspace, from the training corpus in the view subspace, and in the true subspace (cloud, corpus).
"""
from __future__ import annotations

import click
import numpy as np

from eval.experiments import SEEDS, emit


def run(preset: str = "ci32", seed: int = 0) -> dict:
    from alignment.lattice_cards import estimate_cards, lattice_dimension, view_basis
    from captioner.world.scenes import ATTRS
    from captioner.world.setting import setting
    from captioner.world.train import train_world
    from eval.world.chain import embed, world_name

    meta = train_world(preset, seed, progress=False, scenes="train")
    st = setting(seed)
    sides = {"images": ("world-image-jepa", [st.train.samples[i].source() for i in st.disjoint_images],
                        [st.train.samples[i].label for i in st.disjoint_images]),
             "captions": ("world-text-jepa", [st.bank[j] for j in st.disjoint_captions],
                          [st.bank_scene[j] for j in st.disjoint_captions])}
    out = {"preset": preset, "seed": seed, "embed_dim": meta["config"]["embed_dim"],
           "world_cards": sorted((len(v) for v in ATTRS.values()), reverse=True), "sides": {}}
    views = view_pairs(preset, seed)
    for side, (name, items, keys) in sides.items():
        Z = embed(world_name(name, preset, seed, "train"), items)
        d, ev = lattice_dimension(Z, Z.shape[1])
        cards, info = estimate_cards(Z)
        A, B = views[side]
        lam = view_basis(A, B)[2]
        vcards, vinfo = estimate_cards(Z, views=(A, B))       # the cloud in its modality's view subspace
        k = vinfo["view_k"]
        C = np.concatenate([A, B])
        ccards, _ = estimate_cards(C, views=(A, B))           # the training corpus in it
        # the same estimate in the true lattice subspace (found with the labels): can the cloud be read at all?
        ocards, _ = estimate_cards((Z - Z.mean(0)) @ true_subspace(Z, keys).T)
        V = true_subspace(C, views["keys"] * 2)
        cocards, _ = estimate_cards((C - C.mean(0)) @ V.T)
        out["sides"][side] = {"eigenvalues": np.round(ev[:20] / ev[0], 3).tolist(), "lattice_dim": int(d),
                              "searched_dim": int(info["dim"]), "cards": list(cards),
                              "additive_r2": round(additive_r2(Z, keys), 3),
                              "additive_r2_in_subspace": round(additive_r2(Z, keys, within=True), 3),
                              "view_eigenvalues": np.round(lam[:20], 3).tolist(), "view_k": k,
                              "view_cards": list(vcards), "scenes": len(set(keys)),
                              "corpus_scenes": len(set(views["keys"])), "corpus_cards": list(ccards),
                              "true_subspace_cards": list(ocards), "corpus_true_subspace_cards": list(cocards)}
    return out


def _design(keys) -> np.ndarray:
    """(len(keys), 1 + sum k) the additive model's design on the *true* labels: a constant and one indicator
    per attribute value (read from the scene keys; a diagnostic, never given to the estimate)."""
    from captioner.world.setting import attribute_values

    uk, inv = np.unique(np.asarray(keys), return_inverse=True)
    av = attribute_values(list(uk))
    return np.concatenate([np.ones((len(inv), 1))] + [np.eye(v.max() + 1)[v[inv]] for v in av.values()], 1)


def _span(F: np.ndarray) -> np.ndarray:
    """(d, D) orthonormal basis of the span of the centred fitted values ``F`` (at most sum(k - 1) directions)."""
    _, sv, Vt = np.linalg.svd(F - F.mean(0), full_matrices=False)
    return Vt[sv > sv[0] * 1e-6]


def true_subspace(Z: np.ndarray, keys) -> np.ndarray:
    """(d, D) orthonormal basis of the span of the additive model fitted to ``Z``'s rows on the *true* labels
    (a diagnostic, never given to the estimate): the lattice's own subspace, were it found."""
    H = _design(keys)
    return _span(H @ np.linalg.lstsq(H, Z, rcond=None)[0])


def additive_r2(Z: np.ndarray, keys: list[str], within: bool = False) -> float:
    """The share of the variance of the scene means of ``Z`` that the additive model (offset + one vector per
    attribute value, fitted by least squares on the true labels) explains; with ``within``, the same share
    inside the subspace the fitted model spans (the scene means projected onto it): how much of the lattice's
    own directions the interactions of attributes share, i.e. whether the lattice would be clean if its
    subspace were found (1) or is not a lattice even there."""
    uk, inv = np.unique(np.asarray(keys), return_inverse=True)
    M = np.stack([Z[inv == i].mean(0) for i in range(len(uk))])
    H = _design(uk)
    F = H @ np.linalg.lstsq(H, M, rcond=None)[0]
    if within:
        V = _span(F)
        M, F = M @ V.T, F @ V.T
    M = M - M.mean(0)
    F = F - F.mean(0)
    return float(1 - ((M - F) ** 2).sum() / (M ** 2).sum())


def view_pairs(preset: str, seed: int, n: int = 3000) -> dict:
    """side -> (A, B): unit-length embeddings of two views (renders 0 and 1; captions 0 and 1) of the first
    ``n`` training draws, by the world's image and text JEPA (the scene lab's ``view_fit``); "keys": those
    draws' scene keys (for the diagnostics only)."""
    from captioner.jepa.embed import embed_texts, embed_uint8
    from captioner.world.models import world_dir
    from captioner.world.recipe import train_models
    from captioner.world.train import lab_config

    t = train_models(lab_config(preset, seed, "train"), world_dir(preset, seed, "train"), progress=False)
    n = min(n, len(t["scenes"]))

    def unit(x):
        x = np.asarray(x, np.float64)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    img = [unit(embed_uint8(t["image"][0], t["img_data"].images[:n, r])) for r in (0, 1)]
    txt = [unit(embed_texts(t["text"][0], "text-jepa", [c[r] for c in t["corpus"].scenes[:n]], t["max_len"]))
           for r in (0, 1)]
    return {"images": tuple(img), "captions": tuple(txt), "keys": [sc.key() for sc in t["scenes"][:n]]}


def table(res: dict) -> str:
    lines = [f"world {res['preset']} seed {res['seed']}, {res['embed_dim']}-d JEPAs; the world's cards "
             f"{','.join(map(str, res['world_cards']))}", "",
             "| side | leading eigenvalues / first | gap-read dimension | searched | cards estimated | additive R^2 "
             "(true labels) | the same in its own subspace | view eigenvalues | view k | cards in the view subspace "
             "| cards from the training corpus (view subspace) | cards in the true subspace: cloud / corpus |",
             "|---|---|---:|---:|---|---:|---:|---|---:|---|---|---|"]
    for side, s in res["sides"].items():
        lines.append(f"| {side} | {', '.join(f'{v:.2f}' for v in s['eigenvalues'][:14])} | {s['lattice_dim']} | "
                     f"{s['searched_dim']} | {','.join(map(str, s['cards']))} | {s['additive_r2']:.3f} | "
                     f"{s.get('additive_r2_in_subspace', float('nan')):.3f} | "
                     f"{', '.join(f'{v:.2f}' for v in s['view_eigenvalues'][:14])} | {s['view_k']} | "
                     f"{','.join(map(str, s['view_cards']))} | "
                     + (f"{','.join(map(str, s['corpus_cards']))} ({s['corpus_scenes']} scenes; the cloud "
                        f"{s['scenes']})" if "corpus_cards" in s else "-") + " | "
                     + (f"{','.join(map(str, s['true_subspace_cards']))} / "
                        f"{','.join(map(str, s['corpus_true_subspace_cards']))}" if "true_subspace_cards" in s
                        else "-") + " |")
    return "\n".join(lines)


def run_seeds(preset: str = "ci32", seeds=(0,)) -> dict:
    """:func:`run` for each seed, and how many sides got the world's cards under each column: from the cloud alone
    (``cards``), in the view subspace (``view_cards``), from the training corpus (``corpus_cards``) and in the
    true subspace (``true_subspace_cards``, ``corpus_true_subspace_cards``)."""
    runs = [run(preset, s) for s in seeds]
    right = {key: sum(side.get(key) == r["world_cards"] for r in runs for side in r["sides"].values())
             for key in ("cards", "view_cards", "corpus_cards", "true_subspace_cards", "corpus_true_subspace_cards")}
    return {"preset": preset, "seeds": list(seeds), "runs": runs, "sides": 2 * len(runs), "cards_right": right}


def tables(res: dict) -> str:
    out = [table(r) for r in res["runs"]]
    out.append(f"cards right ({res['sides']} sides, {len(res['runs'])} seeds): from the cloud alone "
               f"{res['cards_right']['cards']}, in the view subspace {res['cards_right']['view_cards']}, from the "
               f"training corpus in the view subspace {res['cards_right'].get('corpus_cards', 0)}; in the true "
               f"subspace (diagnostic): the cloud {res['cards_right'].get('true_subspace_cards', 0)}, the corpus "
               f"{res['cards_right'].get('corpus_true_subspace_cards', 0)}")
    return "\n\n".join(out)


@click.command("world-wide", help=__doc__)
@click.option("--preset", default="ci32", show_default=True)
@click.option("--seeds", type=SEEDS, default="0", show_default=True)
@click.option("--out", default=None, help="write the JSON here")
@click.option("--json", "json_only", is_flag=True)
def cli(preset, seeds, out, json_only):
    res = run_seeds(preset, seeds)
    emit(res, out, json_only, tables(res))
