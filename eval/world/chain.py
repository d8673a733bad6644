"""One seed of the world's chain: every text encoder x every rotation, scored on the world's test split.

For a text encoder (the world's text JEPA, its next-token LM read at its mean or its last token, the
untrained encoder, MiniLM-L6) and the world's image JEPA, each rotation kind of ``captioner.rotations`` is
fitted on the train split as its setting allows (paired: the train pairs; pair-free: the renders of one set
of scenes and the captions of another, or of the same scenes shuffled; random: nothing), then:

- matcher accuracy (same scenes only): the fraction of renders the matcher paired with a caption of their
  own scene;
- held-out residual: test renders rotated into text space against their own captions, 1 - cos^2 of the two
  centred point clouds (0 = one rotation and a scale apart, 1 = unrelated; the best global scale is free);
- R@1 image -> caption: each test render against one caption of every test scene;
- CIDEr (x100, pycocoevalcap): the nearest train-bank caption (retrieval) against the scene's 5 clean
  captions;
- zero-shot top-1 per attribute (colour, size, column, row, background) from text alone (the bank's captions
  that name each value, ``captioner.world.zeroshot``).
"""
from __future__ import annotations

import time

import numpy as np

from captioner.encoders.base import l2n
from captioner.world.scenes import CARDS  # noqa: F401  (the lattice matcher's one piece of knowledge)

# the rotations table, the decoder and what it reads: the product's (the demo's world pipeline uses them)
from captioner.world.setting import DECODE_INPUT, DECODER, DEFAULT_ROTATIONS, ROTATIONS  # noqa: F401

# key -> (table label, registry encoder name)
TEXT_ENCODERS = {
    "text-jepa": ("text JEPA (good views)", "world-text-jepa"),
    "ntp": ("next-token LM, mean-pooled", "world-ntp"),
    "ntp-last": ("next-token LM, last token", "world-ntp-last"),
    "untrained": ("untrained text encoder", "world-untrained"),
    "minilm-l6": ("MiniLM-L6 (pretrained contrastive, reference)", "minilm-l6"),
}
# random rotations per seed (seeds 0 .. n-1 of ``fit_random``) for the floor: one rotation per world seed
# gives a spread over 3 draws only, too few for a "within 2 std of random" test
RANDOM_ROTATIONS = 10


def world_name(name: str, preset: str, seed: int, scenes: str = "all") -> str:
    """The registry name of a world encoder for ``preset`` / ``seed``, trained on ``scenes`` ("all", or the
    seed's "train" scenes: ``&scenes=train``); other encoders unchanged."""
    if not name.startswith("world-"):
        return name
    return f"{name}?preset={preset}&seed={seed}" + ("" if scenes == "all" else f"&scenes={scenes}")


def embed(name: str, items, device: str = "cpu") -> np.ndarray:
    from captioner.encoders import get_encoder

    return l2n(get_encoder(name, device=device, cache=False).encode(list(items)))


def fit_rotation(key: str, st, X: np.ndarray, Y: np.ndarray, meta: dict, **override):
    """(map, matcher accuracy or None) of rotation ``key`` from train renders ``X`` and bank captions ``Y``
    (``override``: options on top of the key's own, e.g. a random rotation's ``seed``)."""
    from captioner.rotations import ArraySource, get_kind

    kind, opts, data, _ = ROTATIONS[key]
    opts = {**opts, **override}
    if data == "pairs":
        src = ArraySource(meta=meta, X_pairs=X, Y_pairs=Y[st.pair_caption])
    else:
        xr, yr = getattr(st, f"{data}_images"), getattr(st, f"{data}_captions")
        src = ArraySource(meta=meta, X=X[xr], Y=Y[yr])
    k = get_kind(kind)
    fitted = k.fit(src, **k.options(**opts))
    acc = None
    res = fitted.extra.get("result")
    if res is not None and data == "same":
        xs = [st.train.samples[st.same_images[i]].label for i in fitted.extra["xi"]]
        ys = [st.bank_scene[st.same_captions[j]] for j in fitted.extra["yi"]]
        ok = [xs[i] == ys[p] for i, p in enumerate(res.perm) if p >= 0]
        acc = float(np.mean(ok)) if ok else None
    return fitted.map, acc


def held_out_residual(Q: np.ndarray, Y: np.ndarray) -> float:
    """1 - cos^2 between the centred clouds Q (rotated renders) and Y (their captions): 0 = the same up to
    a global scale, 1 = unrelated (anti-aligned counts as unrelated)."""
    Qc, Yc = Q - Q.mean(0), Y - Y.mean(0)
    c = float((Qc * Yc).sum() / max(np.linalg.norm(Qc) * np.linalg.norm(Yc), 1e-12))
    return 1.0 - max(0.0, c) ** 2


def centred(A: np.ndarray, mu: np.ndarray) -> np.ndarray:
    return l2n(A - mu)


def _top1(S: np.ndarray, vals: list, labels) -> float:
    """Top-1 accuracy of the (N, C) scores ``S`` over the values ``vals`` against the true ``labels``."""
    return float(np.mean(np.array(vals)[np.argmax(S, 1)] == labels))


def prototype_inputs(m, X: np.ndarray, Xt: np.ndarray, mu: np.ndarray) -> tuple:
    """What :func:`score_rotation` needs for prototypes: the pool ``X`` (train renders, no label) rotated by
    ``m`` and centred on ``mu``, and the pool's and the test renders' ``Xt`` centred unit image features."""
    c = X.mean(0)
    return centred(np.asarray(m.transform(X), np.float32), mu), l2n(X - c), l2n(Xt - c)


def _zeroshot_proto(Qn: np.ndarray, proto: tuple, ctx: dict) -> dict:
    from captioner.world.zeroshot import PROTOTYPE_WEIGHT
    from captioner.zeroshot import PROTOTYPE_ROUNDS, class_prototypes

    Qp, F, Ft = proto
    out = {}
    for a, (vals, H) in ctx["heads"].items():
        C = class_prototypes(Qp @ H.T, F, PROTOTYPE_WEIGHT, PROTOTYPE_ROUNDS)
        out[a] = _top1(Qn @ H.T + PROTOTYPE_WEIGHT * Ft @ C.T, vals, ctx["labels"][a])
    return out


def score_rotation(Q: np.ndarray, ctx: dict, proto: tuple | None = None) -> dict:
    """Residual, R@1, the retrieved captions and zero-shot top-1 per attribute for the rotated test renders
    ``Q`` (text space) and the text side ``ctx`` (bank, test captions, prompt heads, labels); with ``proto``
    (:func:`prototype_inputs`) also zero-shot with class prototypes (``zeroshot_proto``)."""
    mu = ctx["mu"]
    Qn = centred(Q, mu)
    res = {"residual": held_out_residual(Q, ctx["Y_test_pairs"])}
    sim = Qn @ ctx["scene_caps"].T                        # (N_test, n test scenes)
    res["r_at_1"] = float(np.mean(np.argmax(sim, 1) == ctx["scene_index"]))
    top = np.argmax(Qn @ ctx["bank_c"].T, 1)
    res["captions"] = [ctx["bank"][j] for j in top]
    res["zeroshot"] = {a: _top1(Qn @ H.T, vals, ctx["labels"][a]) for a, (vals, H) in ctx["heads"].items()}
    res["zeroshot_mean"] = float(np.mean(list(res["zeroshot"].values())))
    if proto is not None:
        res["zeroshot_proto"] = _zeroshot_proto(Qn, proto, ctx)
        res["zeroshot_proto_mean"] = float(np.mean(list(res["zeroshot_proto"].values())))
    return res


def text_context(name: str, st, device: str = "cpu") -> dict:
    """The text side of one encoder: bank embeddings, the test pairs' captions, one caption per test scene
    (R@1 candidates) and the zero-shot heads, all centred on the bank's mean."""
    from captioner.world.setting import attribute_labels
    from captioner.world.zeroshot import attribute_head

    Yb = embed(name, st.bank, device)
    mu = Yb.mean(0)
    scenes = sorted({s.label for s in st.test.samples})
    first = {}
    for s in st.test.samples:
        first.setdefault(s.label, s.captions[0])
    Ysc = embed(name, [first[k] for k in scenes], device)
    pair_txt = [s.captions[int(s.id.rsplit("-r", 1)[1]) % len(s.captions)] for s in st.test.samples]
    heads = {attr: attribute_head(lambda t: embed(name, t, device), attr, mu, (st.bank, Yb)) for attr in st.prompts}
    return {"Y": Yb, "mu": mu, "bank": st.bank, "bank_c": centred(Yb, mu), "scene_caps": centred(Ysc, mu),
            "scene_index": np.array([scenes.index(s.label) for s in st.test.samples]),
            "Y_test_pairs": embed(name, pair_txt, device), "heads": heads, "labels": attribute_labels(st.test)}


def decoder_for(name: str, ctx: dict, path, device: str = "cpu"):
    """The text-only decoder of encoder ``name`` on the bank (``train_decoder``: reused when ``path`` holds
    one for the same encoder and corpus; trained again over one of the same encoder since retrained; refused
    for another encoder)."""
    from pathlib import Path

    from captioner.decoder import encoder_diff, preset, read_checkpoint
    from captioner.decoder_train import train_decoder
    from captioner.encoders import get_encoder
    from captioner.errors import CacheMismatchError

    mcfg, tcfg = preset(DECODER["preset"], **{k: v for k, v in DECODER.items() if k != "preset"})
    fp = get_encoder(name).fingerprint()
    try:
        return train_decoder(ctx["bank"], ctx["Y"], fp, path, mcfg, tcfg, device=device, progress=False)
    except CacheMismatchError:
        if encoder_diff(read_checkpoint(Path(path))["text_encoder"], fp) != ["weights_hash"]:
            raise                # kept for another encoder: refused
        # the same encoder since retrained (its weights differ): the report's own decoder is trained again
        return train_decoder(ctx["bank"], ctx["Y"], fp, path, mcfg, tcfg, device=device, progress=False,
                             force=True)


def decode(dec, Q: np.ndarray, ctx: dict, how: str = DECODE_INPUT, temperature: float = 0.03) -> list[str]:
    """Captions by the text-only decoder from the rotated queries ``Q``: read as they are (``how`` "rotation",
    ``captioner.retrieval.onto_manifold``) or through DeCap's projection onto the bank ("projection")."""
    from captioner.bank import CaptionBank
    from captioner.retrieval import onto_manifold, project

    if how not in ("rotation", "projection"):
        raise ValueError(f"decoder input must be 'rotation' or 'projection', not {how!r}")
    bank = CaptionBank(list(ctx["bank"]), ctx["Y"], dec.text_encoder)
    if how == "rotation":
        return dec.generate(onto_manifold(Q, bank))
    return dec.generate(project(Q, bank, temperature=temperature))


def run_seed(st, preset: str, text_keys=None, rotation_keys=None, device: str = "cpu", progress=None,
             decoder_dir=None, random_rotations: int = 1, scenes: str = "all") -> list[dict]:
    """Rows (one per text encoder x rotation) for the world models of ``preset`` / ``st.seed`` trained on
    ``scenes`` (``world_name``); the
    retrieved captions are in each row (``captions``, test-sample order) for CIDEr (``cider``), and with
    ``decoder_dir`` (where the decoders are kept) the decoded ones (``decoded``). The ``random`` key gives
    ``random_rotations`` rows (``random_seed`` 0, 1, ...; only the first is decoded)."""
    from pathlib import Path

    from captioner.encoders import get_encoder

    img = world_name("world-image-jepa", preset, st.seed, scenes)
    X = embed(img, [s.source() for s in st.train.samples], device)
    Xt = embed(img, [s.source() for s in st.test.samples], device)
    rows = []
    for tk in text_keys or list(TEXT_ENCODERS):
        name = world_name(TEXT_ENCODERS[tk][1], preset, st.seed, scenes)
        ctx = text_context(name, st, device)
        meta = {"x_encoder": get_encoder(img).fingerprint(), "y_encoder": get_encoder(name).fingerprint()}
        dec = decoder_for(name, ctx, Path(decoder_dir) / f"decoder-s{st.seed}-{tk}.pt", device) if decoder_dir else None
        plan = [(rk, {"seed": r} if rk == "random" else {}) for rk in rotation_keys or DEFAULT_ROTATIONS
                for r in range(max(1, random_rotations) if rk == "random" else 1)]
        for rk, over in plan:
            t0 = time.time()
            try:
                m, acc = fit_rotation(rk, st, X, ctx["Y"], meta, **over)
            except Exception as e:   # e.g. POT missing or failing: the row says why, the table goes on
                rows.append({"seed": st.seed, "text": tk, "rotation": rk, "error": f"{type(e).__name__}: {e}"})
                continue
            Q = np.asarray(m.transform(Xt), np.float32)
            proto = prototype_inputs(m, X, Xt, ctx["mu"])
            row = {"seed": st.seed, "text": tk, "rotation": rk, "matcher_accuracy": acc,
                   **score_rotation(Q, ctx, proto),
                   "fit_seconds": round(time.time() - t0, 2)}
            if "seed" in over:
                row["random_seed"] = over["seed"]
            if dec is not None and not over.get("seed"):
                row["decoded"] = decode(dec, Q, ctx)
            rows.append(row)
            if progress:
                progress(row)
    return rows


def cider(rows: list[dict], test) -> None:
    """CIDEr (x100) of each row's retrieved (``cider_x100``) and decoded (``cider_decoded_x100``) captions
    against the test scenes' clean captions, in place; one PTB tokenisation (one Java start) for all."""
    from captioner.evaluation.coco import cider_x100, tokenize

    ids = [s.id for s in test.samples]
    texts = sorted({c for r in rows for k in ("captions", "decoded") for c in r.get(k, [])}
                   | {c for s in test.samples for c in s.captions})
    tok = tokenize({i: [t] for i, t in enumerate(texts)})
    index = {t: tok[i][0] for i, t in enumerate(texts)}
    refs = {i: [index[c] for c in s.captions] for i, s in zip(ids, test.samples)}
    for r in rows:
        for key, out in (("captions", "cider_x100"), ("decoded", "cider_decoded_x100")):
            if key in r:
                preds = {i: index[c] for i, c in zip(ids, r[key])}
                r[out] = cider_x100(preds, refs)
