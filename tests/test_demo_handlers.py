"""The demo's handler functions called directly, on the fake pipeline (no server, no models)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from captioner.demo import (
    FULL_PROMPT_LABELS,
    MAX_LABEL_CHARS,
    MAX_LABELS,
    DemoHandlers,
    DemoInputError,
    example_images,
    label_sets,
    null_figure,
    parse_labels,
    tuxpaint_categories,
)
from captioner.errors import CaptionerError
from tests.demo_fakes import FakePipeline, FakePipelineNoTemplates


@pytest.fixture
def pipe():
    return FakePipeline()


@pytest.fixture
def h(pipe):
    return DemoHandlers(pipe)


def solid(path, rgb, size=(32, 32)):
    Image.new("RGB", size, rgb).save(path)
    return str(path)


# -- caption ------------------------------------------------------------------------------------------------

def test_caption_known_answer(h, tmp_path):
    cap, rows, timings, status = h.caption(solid(tmp_path / "red.png", (255, 0, 0)), "paired", top_k=3)
    assert status == ""
    assert cap == "decoded: a red fire truck."
    assert [r[0] for r in rows] == [1, 2, 3]
    assert rows[0][1:] == ["a red fire truck.", 1.0]
    # black and yellow are both 255 away from pure red: 1 - 255 / (255 sqrt 3)
    assert rows[1][2] == rows[2][2] == round(1 - 1 / np.sqrt(3), 4)
    assert "image decode" in timings and "rotate + retrieve 0.5 ms" in timings


def test_caption_rotation_and_decode_pass_through(h, tmp_path):
    red = solid(tmp_path / "red.png", (255, 0, 0))
    cap, rows, _, status = h.caption(red, "pairfree", top_k=1, decode=False)
    assert status == "" and cap == "a red fire truck." and rows == [[1, "a red fire truck.", 0.9]]


def test_caption_accepts_gradio_filedata_and_pil(h, tmp_path):
    blue = solid(tmp_path / "blue.png", (0, 0, 255))
    assert h.caption({"path": blue, "orig_name": "b.png", "meta": {"_type": "gradio.FileData"}})[0] \
        == "decoded: a blue sky over the sea."
    assert h.caption(Image.new("RGB", (8, 8), (0, 255, 0)))[0] == "decoded: a green frog on a leaf."


def test_caption_top_k_is_clamped(h, tmp_path):
    red = solid(tmp_path / "red.png", (255, 0, 0))
    assert len(h.caption(red, top_k=0)[1]) == 1
    assert len(h.caption(red, top_k=10_000)[1]) == 6  # the fake bank has 6 captions (< MAX_TOP_K)
    assert h.caption(red, top_k="many")[3] == "top-k must be a whole number, not 'many'"


def test_no_image(h):
    for empty in (None, "", {}, {"path": None}):
        cap, rows, timings, status = h.caption(empty)
        assert (cap, rows, timings) == ("", [], "") and status.startswith("no image")


def test_not_an_image(h, tmp_path):
    p = tmp_path / "notes.png"
    p.write_text("this is not a picture")
    cap, rows, _, status = h.caption({"path": str(p), "orig_name": "notes.png"})
    assert cap == "" and rows == []
    assert status == "could not read 'notes.png': not an image Pillow can read (PNG, JPEG, GIF, BMP, TIFF, WebP ...)"


def test_truncated_png(h, tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (128, 128, 3), dtype=np.uint8)).save(buf, "PNG")
    p = tmp_path / "cut.png"
    p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    cap, _, _, status = h.caption(str(p))
    assert cap == "" and status.startswith("could not read 'cut.png': unreadable or truncated image")
    assert "\n" not in status and "Traceback" not in status


def test_animated_gif_takes_first_frame(h, tmp_path):
    p = tmp_path / "anim.gif"
    frames = [Image.new("RGB", (32, 32), c) for c in ((255, 0, 0), (0, 0, 255), (0, 255, 0))]
    frames[0].save(p, save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert Image.open(p).n_frames == 3
    assert h.caption(str(p))[0] == "decoded: a red fire truck."


def test_huge_image_is_downscaled(h, pipe, tmp_path, monkeypatch):
    p = tmp_path / "huge.png"
    Image.new("L", (10_000, 10_000), 255).save(p, compress_level=1)  # 0.5 MB on disk, 10^8 pixels
    seen = []
    orig = pipe.caption

    def spy(images, **kw):
        seen.extend(im.size for im in images)
        return orig(images, **kw)

    monkeypatch.setattr(pipe, "caption", spy)
    cap, _, _, status = h.caption(str(p))
    assert status == "" and cap == "decoded: a white cloud."
    assert seen == [(4096, 4096)]  # captioner.images.load_image downscales above 4096 x 4096


def test_pipeline_error_is_one_line_and_handlers_keep_working(tmp_path):
    pipe = FakePipeline(fail_with=RuntimeError("boom\nwith a second line"))
    h = DemoHandlers(pipe)
    red = solid(tmp_path / "red.png", (255, 0, 0))
    assert h.caption(red)[3] == "internal error (RuntimeError: boom); the server is still running"
    assert h.classify(red, "red, blue")[2] == "internal error (RuntimeError: boom); the server is still running"
    pipe.fail_with = None
    assert h.caption(red)[0] == "decoded: a red fire truck."


def test_captioner_error_is_shown_as_is(tmp_path):
    h = DemoHandlers(FakePipeline(fail_with=CaptionerError("no rotation fitted for this pair; run `captioner align`")))
    assert h.caption(solid(tmp_path / "r.png", (255, 0, 0)))[3] == \
        "no rotation fitted for this pair; run `captioner align`"


def test_unknown_rotation(h, tmp_path):
    assert h.caption(solid(tmp_path / "r.png", (255, 0, 0)), "diagonal")[3] == \
        "unknown rotation 'diagonal'; choose one of paired, pairfree"


# -- encoder switching ----------------------------------------------------------------------------------------

def test_switching_encoders_builds_one_pipeline_per_pair_and_caches_it(pipe, tmp_path):
    built = []

    def factory(i, t):
        built.append((i, t))
        return FakePipeline(image_encoder=i, text_encoder=t)

    news = []
    h = DemoHandlers(pipe, factory, notify=news.append)
    assert h.default_pair == ("fake-image", "fake-text")
    assert "efficientnet-lite0" in h.image_choices and "minilm-l6" in h.text_choices
    red = solid(tmp_path / "r.png", (255, 0, 0))
    for _ in range(3):
        assert h.caption(red, "paired", "efficientnet-lite0", "fake-text")[3] == ""
    assert built == [("efficientnet-lite0", "fake-text")]
    assert news == ["first use of efficientnet-lite0 + fake-text: embedding the train set and fitting the rotation "
                    "(this can take minutes on a CPU)"]
    other, _ = h.pipeline("efficientnet-lite0", "fake-text")
    assert other.calls["caption"] == 3 and pipe.calls["caption"] == 0
    assert h.caption(red, "paired", None, None)[3] == "" and pipe.calls["caption"] == 1  # None: the default pair


def test_default_factory_uses_the_pipeline_class(pipe):
    h = DemoHandlers(pipe)
    other, _ = h.pipeline("efficientnet-lite0", "minilm-l6")
    assert type(other) is FakePipeline and (other.image_encoder, other.text_encoder) == ("efficientnet-lite0", "minilm-l6")


def test_unknown_encoder_and_failing_factory(pipe, tmp_path):
    def factory(i, t):
        raise CaptionerError("no rotation between efficientnet-lite0 and minilm-l3; run `captioner align fit`")

    h = DemoHandlers(pipe, factory)
    red = solid(tmp_path / "r.png", (255, 0, 0))
    assert h.caption(red, "paired", "resnet-9000", "fake-text")[3] == "unknown encoder 'resnet-9000'; pick one from the list"
    assert h.caption(red, "paired", "efficientnet-lite0", "minilm-l3")[3] == (
        "cannot use efficientnet-lite0 + minilm-l3: no rotation between efficientnet-lite0 and minilm-l3; "
        "run `captioner align fit`")
    assert h.caption(red)[3] == ""


# -- zero-shot ---------------------------------------------------------------------------------------------------

def test_classify_known_answer(h, pipe, tmp_path):
    probs, rows, status = h.classify(solid(tmp_path / "g.png", (0, 255, 0)), "red, green\nblue\n\ngreen , dog")
    assert status == ""
    assert pipe.last_labels == ["red", "green", "blue", "dog"]
    assert list(probs) == ["green", "red", "blue", "dog"]  # red and blue tie: the first given wins
    assert rows[0][0] == "green" and rows[0][1] == pytest.approx(1.0, abs=1e-3)
    assert sum(probs.values()) == pytest.approx(1.0)


def test_classify_top5_of_many(h, tmp_path):
    probs, rows, status = h.classify(solid(tmp_path / "w.png", (255, 255, 255)),
                                     "\n".join(["red", "green", "blue", "white", "black", "yellow", "cat"]))
    assert status == "" and len(probs) == 5 and len(rows) == 5 and rows[0][0] == "white"


def test_classify_empty_and_single_label(h, tmp_path):
    red = solid(tmp_path / "r.png", (255, 0, 0))
    for text in ("", "  \n , ,\n", None):
        probs, rows, status = h.classify(red, text)
        assert probs == {} and rows == [] and status.startswith("the label list is empty")
    assert h.classify(red, "red")[2] == "only one label ('red'): zero-shot needs at least two to choose between"


def test_classify_ten_thousand_labels_is_capped_with_a_message(h, pipe, tmp_path):
    labels = ["red"] + [f"label {i}" for i in range(9_999)]
    probs, rows, status = h.classify(solid(tmp_path / "r.png", (255, 0, 0)), "\n".join(labels))
    assert status == (f"10,000 labels given; classified against the first {MAX_LABELS:,}; above "
                      f"{FULL_PROMPT_LABELS} labels each is prompted with one template ('a photo of a {{}}.'), not 80")
    assert pipe.last_labels == labels[:MAX_LABELS] and pipe.last_templates == ["a photo of a {}."]
    assert rows[0][0] == "red"


def test_few_labels_keep_the_pipeline_prompts(h, pipe, tmp_path):
    labels = ["red"] + [f"label {i}" for i in range(FULL_PROMPT_LABELS - 1)]
    assert h.classify(solid(tmp_path / "r.png", (255, 0, 0)), ",".join(labels))[2] == ""
    assert len(pipe.last_labels) == FULL_PROMPT_LABELS and pipe.last_templates is None


def test_pipeline_without_templates_caps_lower(tmp_path):
    pipe = FakePipelineNoTemplates()
    labels = ["red"] + [f"label {i}" for i in range(9_999)]
    status = DemoHandlers(pipe).classify(solid(tmp_path / "r.png", (255, 0, 0)), "\n".join(labels))[2]
    assert status == f"10,000 labels given; classified against the first {FULL_PROMPT_LABELS:,}"
    assert pipe.last_labels == labels[:FULL_PROMPT_LABELS]


def test_duplicate_labels_differing_in_case_are_merged(h, pipe, tmp_path):
    assert h.classify(solid(tmp_path / "r.png", (255, 0, 0)), "Red, red, RED\nblue")[2] == ""
    assert pipe.last_labels == ["Red", "blue"]


def test_classify_bad_image(h, tmp_path):
    p = tmp_path / "x.png"
    p.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    probs, rows, status = h.classify(str(p), "a, b")
    assert probs == {} and status.startswith("could not read 'x.png'")


def test_parse_labels():
    assert parse_labels("cat, dog\n\nbird,  cat\n  big   dog ") == (["cat", "dog", "bird", "big dog"], "")
    labels, note = parse_labels("x" * (MAX_LABEL_CHARS + 50) + ", y")
    assert labels == ["x" * MAX_LABEL_CHARS, "y"]
    assert note == f"1 label(s) longer than {MAX_LABEL_CHARS} characters were cut"
    with pytest.raises(DemoInputError, match="empty"):
        parse_labels(",\n,")
    with pytest.raises(DemoInputError, match="characters long"):
        parse_labels("a," * 600_000)


def test_label_sets_and_categories():
    sets = label_sets()
    assert sets and all(len(v) >= 2 for v in sets.values())
    cats = tuxpaint_categories()
    if cats:  # Tux Paint installed: 15 categories, symbols left out, readable names
        assert len(cats) == 15 and "symbols" not in cats and "natural force" in cats
        from captioner.commands.caption import named_label_set

        assert cats == named_label_set("tuxpaint")[1]  # the prompts `make eval` embedded: one cache entry
        assert next(iter(sets)) == "Tux Paint categories (15)"


# -- alignment --------------------------------------------------------------------------------------------------

def test_alignment_table_and_cache(h, pipe):
    rows, fig, plot, summary, status = h.alignment(n_perm=20)
    assert status == ""
    assert rows == [["mutual_knn", 0.42, 0.05, 0.01, 37.0], ["cka", 0.61, 0.21, 0.02, 20.0]]
    assert plot is None and "no scaling-law runs yet" in summary and "150 image-caption pairs" in summary
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["mutual_knn", "cka"]
    h.alignment(n_perm=20)
    assert pipe.calls["alignment_report"] == 1  # cached per (pair, n_perm)
    h.alignment(n_perm=40)
    assert pipe.calls["alignment_report"] == 2


def test_alignment_scaling_plot(tmp_path):
    png = tmp_path / "scaling.png"
    Image.new("RGB", (10, 10)).save(png)
    rows, fig, plot, summary, status = DemoHandlers(FakePipeline(scaling_plot=str(png))).alignment()
    assert status == "" and plot == str(png) and "no scaling-law" not in summary
    # a report pointing at a file that is gone shows no plot rather than a broken image
    assert DemoHandlers(FakePipeline(scaling_plot=str(tmp_path / "gone.png"))).alignment()[2] is None


def test_null_figure_marks_score_and_band():
    fig = null_figure([["cka", 0.6, 0.2, 0.05, 8.0]])
    ax = fig.axes[0]
    bar = ax.patches[0]
    assert bar.get_x() == pytest.approx(0.1) and bar.get_width() == pytest.approx(0.2)  # mean +- 2 std
    dot = [ln for ln in ax.lines if ln.get_marker() == "o"][0]
    assert tuple(dot.get_xdata()) == (0.6,)


# -- examples -------------------------------------------------------------------------------------------------

def test_example_images_are_written_under_home(captioner_home):
    paths = example_images()
    photos = [p for p in paths if p.startswith(str(captioner_home))]
    names = [p.rsplit("/", 1)[1] for p in photos]
    # motorcycle_left is the left image of scikit-image's stereo_motorcycle() pair
    assert names == ["astronaut.png", "chelsea.png", "coffee.png", "rocket.png", "motorcycle_left.png"]
    for p in paths:
        with Image.open(p) as im:
            assert im.size[0] > 16
    stamps = [p for p in paths if p.startswith("/usr/share/tuxpaint/stamps/")]
    assert len(stamps) in (0, 6)


def test_the_rotation_buttons_start_on_head_when_the_pipeline_offers_it():
    pipe = FakePipeline()
    assert DemoHandlers(pipe).default_rotation == "paired"  # the fake offers paired and pairfree only
    pipe.rotations = ["paired", "pairfree", "head"]
    assert DemoHandlers(pipe).default_rotation == "head"


# -- the classifier captioner in the caption tab ------------------------------------------------------------

class _FakeClassifier:
    """Names an image by its mean colour, as ``ClassifierCaptioner`` returns captions (the "per" note too)."""

    def __init__(self):
        self.calls = []

    def __call__(self, images, top_k=5):
        self.calls.append(top_k)
        out = []
        for im in images:
            rgb = np.asarray(im.convert("RGB")).reshape(-1, 3).mean(0)
            name = "fire truck" if rgb[0] > 128 else "frog"
            out.append({"caption": f"A photo of a {name}.", "class_prob": 0.734, "retrieved": [
                {"caption": f"A {name}.", "score": 0.9}, {"caption": "A photo of a cup.", "score": 0.2}][:top_k],
                "timings_ms": {"encode": 3.0, "rotate_retrieve": 0.25, "decode": 0.0, "per": "image (batch average)"}})
        return out


def test_the_caption_tab_offers_the_classifier_first_when_there_is_one(pipe, tmp_path):
    assert DemoHandlers(pipe).captioners == ["retrieval", "decoder"]  # a fake pipeline builds no classifier
    clf = _FakeClassifier()
    h = DemoHandlers(pipe, classifier=clf)
    assert h.captioners == ["classifier", "retrieval", "decoder"] and h.default_captioner == "classifier"
    cap, rows, timings, status = h.caption(solid(tmp_path / "red.png", (255, 0, 0)), "paired", top_k=1,
                                           captioner="classifier")
    assert status == "" and cap == "A photo of a fire truck.  (class probability 0.73)"  # as the CLI shows it
    assert rows == [[1, "A fire truck.", 0.9]]
    assert clf.calls == [1] and pipe.calls["caption"] == 0  # the rotation pipeline is not touched
    assert "encode 3.0 ms" in timings and "per" not in timings and "caption decoding" not in timings
    # the rotation captioners are still there ("rotation", the older name of "decoder", too), and an unknown
    # one is one line listing those of the registry on offer
    for name in ("decoder", "rotation"):
        assert h.caption(solid(tmp_path / "r2.png", (255, 0, 0)), "paired", captioner=name)[0] == \
            "decoded: a red fire truck."
    assert h.caption(solid(tmp_path / "r2.png", (255, 0, 0)), "paired", captioner="retrieval", top_k=1)[0] == \
        "a red fire truck."
    status = h.caption(solid(tmp_path / "r3.png", (255, 0, 0)), "paired", captioner="magic")[-1]
    assert status == "unknown captioner 'magic'; choose one of classifier, retrieval, decoder"
    assert DemoHandlers(pipe).caption(solid(tmp_path / "r4.png", (0, 255, 0)), captioner="classifier")[-1] == \
        "unknown captioner 'classifier'; choose one of retrieval, decoder"


def test_classifier_captioner_builds_its_pipeline_once_with_the_default_bank():
    import threading

    from captioner.photocaption import CLASSIFIER_ENCODER, ClassifierCaptioner

    built = []

    def factory(**kw):
        built.append(kw)
        return object()

    c = ClassifierCaptioner(factory, "minilm-l3", "cpu")
    threads = [threading.Thread(target=c.pipeline) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == [{"image_encoder": CLASSIFIER_ENCODER, "text_encoder": "minilm-l3", "device": "cpu",
                      "progress": False, "bank": "default"}]


def test_a_real_pipeline_gets_a_classifier_with_its_text_encoder_device_and_progress():
    from captioner.photocaption import ClassifierCaptioner

    class WithBank(FakePipeline):
        progress = True

        def caption_bank(self):
            raise AssertionError("not built until a caption or the warm-up asks")

    pipe = WithBank(text_encoder="fake-text", device="cpu")
    h = DemoHandlers(pipe)
    c = h.classifier
    assert isinstance(c, ClassifierCaptioner) and h.captioners == ["classifier", "retrieval", "decoder"]
    assert (c.factory, c.text_encoder, c.device, c.bank, c.progress) == (WithBank, "fake-text", "cpu", "default", True)
