"""The demo's World tab: a random held-out scene of the JEPA world, its render, its caption through the
paired and the pair-free rotation (the ``Pipeline`` of the world's image and text JEPAs, trained on the
world's train split: the same code as for Tux Paint; the pair-free map from the lattice matcher on renders
and captions of disjoint train scenes, as in the world report (``python -m eval world report``)) and its true description.

The caption is the text-only decoder's, reading the rotated render itself (``decode_input="rotation"``, the
report's ``captioner.world.setting.DECODE_INPUT``): held-out scenes are never in the bank of train captions, so the
top retrieved caption always names at least one attribute wrong, while the decoder names all five right on
96-98 % of val renders (``python -m eval experiment world-decode-input``). The nearest train caption is
returned beside it."""
from __future__ import annotations

import threading

import numpy as np

_PIPES: dict = {}
_LOCK = threading.Lock()


def world_pipeline(preset: str | None = None, seed: int = 0, progress: bool | None = None):
    """One Pipeline per (preset, seed): world image JEPA -> world text JEPA, bank = the train captions.
    ``progress``: show its build steps (the decoder's training bar on first use); None leaves it as it is."""
    from captioner.datasets import get_dataset
    from captioner.pipeline import Pipeline
    from captioner.world.models import default_preset
    from captioner.world.setting import DECODE_INPUT, DECODER

    preset = preset or default_preset(seed)
    with _LOCK:
        if (preset, seed) not in _PIPES:
            q = f"?preset={preset}&seed={seed}"
            _PIPES[(preset, seed)] = Pipeline(f"world-image-jepa{q}", f"world-text-jepa{q}", progress=False,
                                              train_set=get_dataset("world", "train", seed=seed),
                                              exclude=get_dataset("world", "test", seed=seed).captions(),
                                              decoder_corpus="bank", decoder_preset=DECODER["preset"],
                                              decoder_overrides={k: v for k, v in DECODER.items() if k != "preset"},
                                              decode_input=DECODE_INPUT)
            _PIPES[(preset, seed)].world_seed = seed     # its val split calibrates zero-shot (world.zeroshot)
            _PIPES[(preset, seed)].use_rotation("pairfree", _lattice_map(_PIPES[(preset, seed)], seed))
        if progress is not None:
            _PIPES[(preset, seed)].progress = progress
        return _PIPES[(preset, seed)]


def _lattice_map(pipe, seed: int):
    """The pair-free map of the report's disjoint setting (``captioner.world.setting``): renders of one set of
    train scenes, captions of a disjoint set, both drawn from the skewed prior (under the train split's
    uniform counts no pair-free method can identify the rotation), matched by the lattice matcher."""
    from captioner.rotations import ArraySource, get_kind
    from captioner.world.setting import ROTATIONS, setting

    st = setting(seed)
    xi, yi = np.unique(st.disjoint_images, return_inverse=True), np.unique(st.disjoint_captions,
                                                                            return_inverse=True)
    X = pipe.encode_images([st.train.samples[i].source() for i in xi[0]])[xi[1]]
    Y = pipe.encoder("text").encode([st.bank[j] for j in yi[0]])[yi[1]]
    name, opts, _, _ = ROTATIONS["lattice-disjoint"]     # the report's pair-free rotation, its options
    kind = get_kind(name)
    return kind.fit(ArraySource(meta={}, X=X, Y=Y), **kind.options(**opts)).map


def world_example(index: int | None = None, preset: str | None = None, seed: int = 0) -> dict:
    """A held-out scene (test split; ``index`` or a random one): {"image", "scene", "truth", "paired",
    "pairfree", "nearest"}: the decoded caption through each rotation, and {rotation: the nearest train
    caption} under "nearest"."""
    import random

    from captioner.datasets import get_dataset

    test = get_dataset("world", "test", seed=seed)
    i = random.randrange(len(test)) if index is None else int(index) % len(test)
    s = test.samples[i]
    im = s.source().resize((160, 160), 0)       # nearest: the 32-px render, shown large
    pipe = world_pipeline(preset, seed)
    got = {r: pipe.caption([s.source()], top_k=1, rotation=r)[0] for r in ("paired", "pairfree")}
    return {"image": im, "scene": s.label, "truth": s.captions[0], **{r: g["caption"] for r, g in got.items()},
            "nearest": {r: g["retrieved"][0]["caption"] for r, g in got.items()}}


def world_markdown(ex: dict) -> str:
    """The World tab's text for a :func:`world_example`."""
    near = ex["nearest"]
    return (f"**pair-free rotation:** {ex['pairfree']}  \n**paired rotation:** {ex['paired']}  \n"
            f"**true description:** {ex['truth']}  \n(scene `{ex['scene']}`)  \n"
            f"Nearest train caption (this scene is never in the bank): pair-free \"{near['pairfree']}\", "
            f"paired \"{near['paired']}\"")


def world_tab(gr) -> None:
    """The World tab: a random held-out scene of the JEPA world, captioned through the pair-free and the
    paired rotation beside its true description (:func:`world_example`; needs `captioner world train`)."""
    from captioner.errors import CaptionerError

    def draw():
        try:
            ex = world_example()
        except CaptionerError as e:
            return None, f"**{e}**"
        return ex["image"], world_markdown(ex)

    with gr.Tab("World", id="world-tab"):
        gr.Markdown("The JEPA world: JEPAs trained apart on renders and on captions, one rotation between them.")
        w_btn = gr.Button("Draw a held-out scene", variant="primary", elem_id="world-btn")
        with gr.Row():
            w_image = gr.Image(type="pil", label="Render", interactive=False, elem_id="world-image", height=200)
            w_text = gr.Markdown(elem_id="world-captions")
        w_btn.click(draw, [], [w_image, w_text], api_name="world")
