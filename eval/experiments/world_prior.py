"""The world's pair-free map when the caption side has a prior of its own (issue 40): captions drawn from
the disjoint setting's caption scenes with each value's frequency perturbed by up to +-p (relative), and a
share of them leaving out one attribute, at rates that differ by attribute (``OMIT_RATES``: what people do
not think worth saying). The renders keep the setting's prior. For each divergence the lattice matcher is
fitted twice: with nothing from the world's definition (cards estimated, geometry-aware correspondence,
rows at an attribute's mean set aside: the ``lattice-estimated`` rotation) and with the cards given and
values matched by frequency order (``lattice-disjoint``, the matcher before); paired Procrustes is the
reference. Scored on the test renders: R@1, CIDEr x100 of the retrieved and of the decoded caption, zero-shot
top-1 per attribute. Needs the world's models (``captioner world train --preset P --seed N [--scenes train]``).

    python -m eval experiment world-prior [--preset lab] [--seeds 0,1,2] [--scenes train]
        [--grid 0:0,0.1:0.1,0.2:0.2,0.3:0.2] [--text-omit 0.2] [--bound] [--out F.json] [--plot F.png] [--json]
"""
from __future__ import annotations

import os
import sys
import time

import click
import numpy as np

from eval.experiments import SEEDS, emit

# (relative frequency perturbation p, share of captions that omit one attribute)
GRID = [(0.0, 0.0), (0.1, 0.1), (0.2, 0.2), (0.3, 0.2)]
# which attribute an omitting caption leaves out: unequal by attribute (reporting bias), summing to 1
OMIT_RATES = {"colour": 0.1, "size": 0.3, "col": 0.15, "row": 0.25, "background": 0.2}
FITS = ("lattice-estimated", "lattice-disjoint")
LABELS = {"lattice-estimated": "cards estimated, geometry", "lattice-disjoint": "cards given, frequency order",
          "words-complete": "cards estimated, omitting captions set aside by their words (bound)"}
# an upper bound for the label-free omission flags (``--bound``): the lattice-estimated fit on the captions that
# name all five attributes, read from their words (``read_caption``), which no user without labels has
BOUND = "words-complete"


def fits(bound: bool) -> tuple[str, ...]:
    """The fits of one grid point: ``FITS``, and the bound with ``--bound``."""
    return FITS + ((BOUND,) if bound else ())


def omit_tag(rate: float) -> str:
    """The report folder's name part of a text JEPA trained with ``rate`` of captions omitting an attribute."""
    return f"text-jepa-omit{round(100 * rate)}"


def caption_side(st, p: float, omit: float, seed: int) -> tuple[list[str], list[str]]:
    """(captions, their scene keys): ``N_CAPTIONS`` clean captions of the disjoint setting's caption scenes,
    scenes drawn by the setting's prior with each value's weight times (1 + p u), u ~ U(-1, 1) drawn once per
    seed and value (so the grid moves along one direction), and a share ``omit`` of the captions leaving out
    one attribute chosen by ``OMIT_RATES``."""
    from captioner.world import scenes as W
    from captioner.world.setting import N_CAPTIONS, PRIOR, attribute_values, prior_weights

    rng = np.random.default_rng(seed + 50_000)
    u = {a: rng.uniform(-1, 1, len(W.ATTRS[a])) for a in PRIOR}            # the direction: fixed per seed
    index = {sc.key(): sc for sc in W.all_scenes()}
    keys = sorted({st.bank_scene[j] for j in st.uniform_captions})
    values = attribute_values(keys)
    w = prior_weights(keys) * np.prod([1 + p * u[a][values[a]] for a in PRIOR], axis=0)
    draw = np.random.default_rng(seed + 60_000)
    picked = draw.choice(len(keys), size=N_CAPTIONS, replace=True, p=w / w.sum())
    attrs = list(OMIT_RATES)
    rates = np.array([OMIT_RATES[a] for a in attrs])
    texts, scene_keys = [], []
    for n, i in enumerate(picked):
        left_out = attrs[draw.choice(len(attrs), p=rates / rates.sum())] if draw.random() < omit else None
        texts.append(W.describe(index[keys[i]], seed=seed * 1_000_003 + n, corrupt=0.0, omit=left_out))
        scene_keys.append(keys[i])
    return texts, scene_keys


def omit_text_encoder(preset: str, seed: int, scenes: str, rate: float, progress: bool = True) -> str:
    """The registry name (``jepa:<run>``) of a text JEPA trained like the world's (the preset's restarts, the
    lowest final loss kept) on a caption corpus where a share ``rate`` of the captions leaves out one
    attribute (``LabConfig.caption_omit``; trained once, kept in the report folder, reused after)."""
    from dataclasses import replace

    from captioner.world.recipe import kept_name, train_text_jepa
    from captioner.world.train import lab_config
    from eval.world.table import report_dir

    out = report_dir(preset, scenes) / f"{omit_tag(rate)}-s{seed}"
    if progress:
        print(f"[world-prior] seed {seed}: the text JEPA of a corpus with {rate:.0%} of captions omitting an "
              f"attribute, in {out} (trained once, ~2 min a run)", file=sys.stderr, flush=True)
    losses = train_text_jepa(replace(lab_config(preset, seed, scenes), caption_omit=rate), out / "text-jepa",
                             progress=False)[3]
    return f"jepa:{out / kept_name('text-jepa', losses)}"


def omission_flags(fitted, complete: np.ndarray) -> dict:
    """How well the cards-estimated fit's label-free flags (caption rows it set aside as omitting an attribute)
    found the captions that omit one (``complete``: read from their words): the share of omitting captions
    flagged and the share of complete ones flagged."""
    yi = fitted.extra["yi"]
    flagged = np.zeros(len(complete), bool)
    flagged[yi] = fitted.extra["result"].info["labels_y"][:, 0] < 0
    return {"omitting_flagged": float(flagged[~complete].mean()) if (~complete).any() else None,
            "complete_flagged": float(flagged[complete].mean())}


def run(preset: str = "lab", seeds=(0, 1, 2), scenes: str = "train", grid=GRID, progress: bool = True,
        text_omit: float = 0.0, bound: bool = False) -> dict:
    from captioner.rotations import ArraySource, get_kind
    from captioner.world import scenes as W
    from captioner.world.setting import ROTATIONS, setting
    from eval.world import chain
    from eval.world.table import report_dir

    t0 = time.time()
    rows = []
    for seed in seeds:
        st = setting(seed)
        img = chain.world_name("world-image-jepa", preset, seed, scenes)
        X = chain.embed(img, [s.source() for s in st.train.samples])
        Xt = chain.embed(img, [s.source() for s in st.test.samples])
        report = report_dir(preset, scenes)
        report.mkdir(parents=True, exist_ok=True)
        if text_omit:
            name = omit_text_encoder(preset, seed, scenes, text_omit, progress)
            dec_path = report / f"decoder-s{seed}-{omit_tag(text_omit)}.pt"
        else:
            name = chain.world_name("world-text-jepa", preset, seed, scenes)
            dec_path = report / f"decoder-s{seed}-text-jepa.pt"
        ctx = chain.text_context(name, st)
        dec = chain.decoder_for(name, ctx, dec_path)
        m, _ = chain.fit_rotation("paired", st, X, ctx["Y"], {})
        Q = np.asarray(m.transform(Xt), np.float32)
        ref = {"seed": seed, "p": None, "omit": None, "rotation": "paired", **chain.score_rotation(Q, ctx),
               "decoded": chain.decode(dec, Q, ctx)}
        seed_rows = [ref]
        for p, omit in grid:
            texts, _ = caption_side(st, p, omit, seed)
            Y = chain.embed(name, texts)
            complete = np.array([None not in W.read_caption(t).values() for t in texts])
            for rk in fits(bound):
                kind, opts, _, _ = ROTATIONS["lattice-estimated" if rk == BOUND else rk]
                k = get_kind(kind)
                t1 = time.time()
                try:
                    fitted = k.fit(ArraySource(X=X[st.disjoint_images], Y=Y[complete] if rk == BOUND else Y),
                                   **k.options(**opts))
                except Exception as e:   # the row says why, the table goes on
                    seed_rows.append({"seed": seed, "p": p, "omit": omit, "rotation": rk,
                                      "error": f"{type(e).__name__}: {e}"})
                    continue
                Q = np.asarray(fitted.map.transform(Xt), np.float32)
                r = {"seed": seed, "p": p, "omit": omit, "rotation": rk, **chain.score_rotation(Q, ctx),
                     "decoded": chain.decode(dec, Q, ctx), "fit_seconds": round(time.time() - t1, 1)}
                if rk == "lattice-estimated":
                    r["flags"] = omission_flags(fitted, complete)
                seed_rows.append(r)
                if progress:
                    print(f"[world-prior] seed {seed} p {p:.2f} omit {omit:.2f} {rk:<18} R@1 {r['r_at_1']:.3f} "
                          f"zero-shot {r['zeroshot_mean']:.3f} ({r['fit_seconds']} s)"
                          + (f" flags: {r['flags']}" if "flags" in r else ""), file=sys.stderr, flush=True)
        chain.cider(seed_rows, st.test)
        for r in seed_rows:
            r.pop("captions", None)
            r.pop("decoded", None)
            if "cider_x100" in r:
                r["cider_ratio"] = r["cider_x100"] / max(ref["cider_x100"], 1e-9)
                r["cider_decoded_ratio"] = r["cider_decoded_x100"] / max(ref["cider_decoded_x100"], 1e-9)
                r["zeroshot_gap"] = {a: r["zeroshot"][a] - ref["zeroshot"][a] for a in ref["zeroshot"]}
        rows += seed_rows
    return {"preset": preset, "scenes": scenes, "seeds": list(seeds), "text_omit": text_omit, "bound": bound,
            "grid": [list(g) for g in grid],
            "omit_rates": OMIT_RATES, "rows": rows, "seconds": round(time.time() - t0, 1),
            "loadavg": os.getloadavg()}


def summary(res: dict) -> list[dict]:
    """One line per (divergence, rotation): the mean and the minimum over seeds of the pair-free CIDEr as a
    share of paired (retrieval and decoder), R@1, the worst zero-shot gap to paired (points)."""
    out = []
    for p, omit in res["grid"]:
        for rk in fits(res.get("bound", False)):
            rs = [r for r in res["rows"] if r["p"] == p and r["omit"] == omit and r["rotation"] == rk]
            ok = [r for r in rs if "error" not in r]
            if not ok:
                out.append({"p": p, "omit": omit, "rotation": rk, "errors": len(rs)})
                continue
            out.append({"p": p, "omit": omit, "rotation": rk, "seeds": len(ok), "errors": len(rs) - len(ok),
                        "cider_ratio": [float(np.mean([r["cider_ratio"] for r in ok])),
                                        float(min(r["cider_ratio"] for r in ok))],
                        "cider_decoded_ratio": [float(np.mean([r["cider_decoded_ratio"] for r in ok])),
                                                float(min(r["cider_decoded_ratio"] for r in ok))],
                        "r_at_1": float(np.mean([r["r_at_1"] for r in ok])),
                        "zeroshot_mean": float(np.mean([r["zeroshot_mean"] for r in ok])),
                        "worst_gap": float(min(min(r["zeroshot_gap"].values()) for r in ok))})
    return out


def table(res: dict) -> str:
    head = ("| caption prior +- | omitted | matcher | CIDEr % of paired, retrieval (min) | decoder (min) | R@1 | "
            "zero-shot mean | worst zero-shot gap (points) |")
    lines = [head, "|---:|---:|---|---|---|---:|---:|---:|"]
    for s in summary(res):
        if "cider_ratio" not in s:
            lines.append(f"| {s['p']:.0%} | {s['omit']:.0%} | {LABELS[s['rotation']]} | failed ({s['errors']} seeds) | | | | |")
            continue
        lines.append(f"| {s['p']:.0%} | {s['omit']:.0%} | {LABELS[s['rotation']]} | {100 * s['cider_ratio'][0]:.1f} "
                     f"({100 * s['cider_ratio'][1]:.1f}) | {100 * s['cider_decoded_ratio'][0]:.1f} "
                     f"({100 * s['cider_decoded_ratio'][1]:.1f}) | {s['r_at_1']:.3f} | {s['zeroshot_mean']:.3f} | "
                     f"{100 * s['worst_gap']:+.1f} |")
    return "\n".join(lines)


def plot(res: dict, path: str) -> None:
    """Pair-free CIDEr (decoder, % of paired) and mean zero-shot against the divergence, per matcher."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    xt = [f"{p:.0%}\n{o:.0%}" for p, o in res["grid"]]
    for rk in fits(res.get("bound", False)):
        ss = [s for s in summary(res) if s["rotation"] == rk]
        axes[0].plot(range(len(ss)), [100 * s.get("cider_decoded_ratio", [np.nan])[0] for s in ss], "o-",
                     label=LABELS[rk])
        axes[1].plot(range(len(ss)), [s.get("zeroshot_mean", np.nan) for s in ss], "o-", label=LABELS[rk])
    axes[0].axhline(80, ls=":", c="grey")
    axes[0].set_ylabel("pair-free CIDEr, % of paired (decoder)")
    axes[1].set_ylabel("zero-shot top-1, mean of 5 attributes")
    for ax in axes:
        ax.set_xticks(range(len(xt)), xt)
        ax.set_xlabel("caption prior +- (top), captions omitting an attribute (bottom)")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, loc="lower center", ncol=len(names))
    corpus = (f"; text JEPA trained with {res['text_omit']:.0%} of captions omitting an attribute"
              if res.get("text_omit") else "")
    fig.suptitle(f"world {res['preset']}, seeds {res['seeds']}, encoders trained on {res['scenes']} scenes{corpus}",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)


def parse_grid(value: str) -> list[tuple[float, float]]:
    try:
        grid = [tuple(float(x) for x in item.split(":")) for item in value.split(",") if item.strip()]
    except ValueError:
        grid = []
    if not grid or any(len(g) != 2 or not (0 <= g[0] < 1 and 0 <= g[1] <= 1) for g in grid):
        raise click.BadParameter(f"{value!r}: give p:omit pairs, e.g. 0:0,0.3:0.2 (0 <= p < 1, 0 <= omit <= 1)")
    return grid


@click.command("world-prior", help=__doc__)
@click.option("--preset", default="lab", show_default=True)
@click.option("--seeds", type=SEEDS, default="0,1,2", show_default=True)
@click.option("--scenes", type=click.Choice(["all", "train"]), default="train", show_default=True)
@click.option("--grid", default=",".join(f"{p}:{o}" for p, o in GRID), show_default=True,
              help="caption prior divergence : share of captions omitting an attribute, comma-separated")
@click.option("--text-omit", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="score a text JEPA trained on captions of which this share omits an attribute (trained once "
                   "into the report folder); 0: the world's text JEPA (complete captions)")
@click.option("--bound", is_flag=True, help="also fit with the omitting captions set aside by their words (an upper "
                                          "bound for the label-free flags)")
@click.option("--out", default=None, help="write the JSON here")
@click.option("--plot", "plot_path", default=None, help="draw the figure here (PNG)")
@click.option("--json", "json_only", is_flag=True)
def cli(preset, seeds, scenes, grid, text_omit, bound, out, plot_path, json_only):
    res = run(preset, seeds, scenes, parse_grid(grid), text_omit=text_omit, bound=bound)
    res["summary"] = summary(res)
    if plot_path:
        plot(res, plot_path)
    emit(res, out, json_only, table(res))
