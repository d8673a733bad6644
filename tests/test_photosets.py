"""The validation photo sets (GCompris, openclipart), the Qt resource reader and the subject-named metric."""
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from captioner.datasets import GCOMPRIS_RCC, OPENCLIPART_ROOT
from captioner.errors import CaptionerError
from captioner.rcc import read_rcc
from captioner.subject import WORDNET_DIR, names_subject, subject_terms

HAS_GC = (GCOMPRIS_RCC / "categorization.rcc").exists()
HAS_OC = OPENCLIPART_ROOT.is_dir()
HAS_WN = (WORDNET_DIR / "data.noun").exists()


def _rcc(files: dict, version: int = 3) -> bytes:
    """A Qt resource file with one directory "d" holding ``files`` (even ones zlib-compressed), written from
    the format description in captioner/rcc.py."""
    names, data = b"", b""
    name_off = {}
    for n in ["d"] + list(files):
        name_off[n] = len(names)
        names += struct.pack(">HI", len(n), 0) + n.encode("utf-16-be")
    node = 14 if version == 1 else 22
    pad = b"\0" * (node - 14)
    tree = struct.pack(">IHII", 0, 2, 1, 1) + pad  # root: 1 child at index 1
    tree += struct.pack(">IHII", name_off["d"], 2, len(files), 2) + pad
    for i, (n, raw) in enumerate(files.items()):
        blob, flags = (struct.pack(">I", len(raw)) + zlib.compress(raw), 1) if i % 2 == 0 else (raw, 0)
        tree += struct.pack(">IHHHI", name_off[n], flags, 0, 0, len(data)) + pad
        data += struct.pack(">I", len(blob)) + blob
    header = b"qres" + struct.pack(">IIII", version, 0, 0, 0) + (b"\0\0\0\0" if version >= 3 else b"")
    t_off = len(header)
    d_off = t_off + len(tree)
    n_off = d_off + len(data)
    header = b"qres" + struct.pack(">IIII", version, t_off, d_off, n_off) + header[20:]
    return header + tree + data + names


@pytest.mark.parametrize("version", [1, 2, 3])
def test_rcc_reader_returns_every_file_with_its_path(tmp_path, version):
    png = io.BytesIO()
    Image.new("RGB", (3, 2), (9, 8, 7)).save(png, "PNG")
    files = {"a.png": png.getvalue(), "b.txt": b"hello", "c.txt": b"x" * 1000}
    p = tmp_path / "t.rcc"
    p.write_bytes(_rcc(files, version))
    got = read_rcc(p)
    assert got == {f"d/{k}": v for k, v in files.items()}
    assert Image.open(io.BytesIO(got["d/a.png"])).getpixel((0, 0)) == (9, 8, 7)


def test_rcc_reader_refuses_other_and_truncated_files(tmp_path):
    p = tmp_path / "x.rcc"
    p.write_bytes(b"PK\3\4 not a resource file")
    with pytest.raises(CaptionerError, match="not a Qt resource file"):
        read_rcc(p)
    p.write_bytes(_rcc({"a.txt": b"abc"})[:40])
    with pytest.raises(CaptionerError, match="truncated"):
        read_rcc(p)


@pytest.mark.skipif(not HAS_WN, reason="wordnet-base not installed (scripts/setup.sh)")
def test_subject_terms_follow_the_definition():
    assert subject_terms("Great Pyramid of Giza") == {"pyramid", "polyhedron"}  # head noun before "of"
    assert "tower" in subject_terms("Eiffel Tower") and "eiffel" not in subject_terms("Eiffel Tower")
    assert {"cat", "feline", "carnivore"} <= subject_terms("Cartoon cat")
    assert "animal" not in subject_terms("giraffe")  # generic words never count
    assert subject_terms("mela rossa") == frozenset()  # no English noun: no terms
    assert names_subject("Two cups of coffee on a table.", "coffee cup")
    assert names_subject("A small feline sleeping.", "cat")
    assert names_subject("pliers on a bench", "side cutter", ("pliers",))
    assert not names_subject("a police van.", "coffee cup")
    assert not names_subject("an animal in the grass", "giraffe")
    assert not names_subject("a catalogue", "cat")  # whole words only
    assert names_subject("a photo of a goldfish.", "fish")  # a more specific noun names the subject
    assert not names_subject("a tiger", "Jaguar")  # a sibling does not


@pytest.mark.skipif(not HAS_GC, reason="gcompris-qt-data not installed (scripts/setup.sh)")
def test_gcompris_photos_have_labels_and_disjoint_splits():
    from captioner.datasets import get_dataset
    from captioner.images import load_image

    allset = get_dataset("gcompris", "all")
    parts = {s: get_dataset("gcompris", s) for s in ("train", "val", "test")}
    assert len(allset) == 222 == sum(len(p) for p in parts.values())
    labels = {s: {x.label for x in p.samples} for s, p in parts.items()}
    assert not labels["val"] & labels["test"] and not labels["train"] & labels["test"]
    assert sum(len(x.captions) > 1 for x in allset.samples) == 73  # the explore activities' descriptions
    giraffe = next(x for x in allset.samples if x.label == "Giraffe")
    assert giraffe.captions[0] == "A photo of a giraffe." and "Africa" in giraffe.captions[1]
    im = load_image(giraffe.source)
    assert im.mode == "RGB" and min(im.size) > 200


@pytest.mark.skipif(not (HAS_OC and HAS_WN), reason="openclipart-svg / wordnet-base not installed")
def test_openclipart_objects_render_with_english_titles():
    pytest.importorskip("cairosvg")
    from captioner.datasets import get_dataset
    from captioner.images import load_image
    from captioner.subject import has_subject

    val = get_dataset("openclipart", "val")
    assert 250 < len(val) < 500
    assert all(has_subject(s.label) and s.captions[0] == s.label for s in val.samples)
    assert not any(s.id.startswith(("shapes/", "signs_and_symbols/", "computer/")) for s in val.samples)
    im = load_image(val.samples[0].source)
    assert im.mode == "RGB" and im.size[0] == 224


@pytest.mark.slow
def test_classifier_captioner_names_everyday_photos_with_the_real_encoder(tmp_path):
    """The default captioner on two real photos (scikit-image): no rotation, no image-caption pair."""
    from captioner.datasets import get_dataset
    from captioner.photocaption import classifier_captions
    from captioner.pipeline import Pipeline

    bank = tmp_path / "bank.txt"
    bank.write_text("A cup of coffee.\nA cat on a sofa.\nA red car.\n")
    photos = {s.id: s.source for s in get_dataset("samples").samples}
    pipe = Pipeline(progress=False, bank=str(bank))
    out = classifier_captions(pipe, [photos["coffee"], photos["chelsea"]], top_k=3)
    assert out[0]["caption"] == "A photo of an espresso." and out[0]["retrieved"][0]["caption"] == "A cup of coffee."
    assert out[1]["retrieved"][0]["caption"] == "A cat on a sofa." and len(out[1]["retrieved"]) == 3
    from captioner.encoders.heads import classifier_head
    from captioner.photocaption import cached_head

    W, b, names = cached_head(pipe.encoder("image"))  # read back from $CAPTIONER_HOME/heads
    W0, b0, names0 = classifier_head(pipe.encoder("image"))
    assert np.array_equal(W, W0) and np.array_equal(b, b0) and names == names0 and len(names) == 1000


def test_photos_val_fallback_takes_the_mapped_caption_only_below_the_threshold():
    from eval.photos_val import with_fallback

    P = np.array([[0.7, 0.2, 0.1], [0.05, 0.06, 0.89], [0.34, 0.33, 0.33], [0.09, 0.08, 0.07]])
    caps = with_fallback(P, ["owl", "cat", "ink"], ["m0", "m1", "m2", "m3"], below=0.35)
    assert caps == ["A photo of an owl.", "A photo of an ink.", "m2", "m3"]
    assert with_fallback(P[3:], ["owl", "cat", "ink"], ["m3"], below=0.0) == ["A photo of an owl."]


def test_the_head_noun_ends_at_a_preposition_and_skips_single_letters():
    assert "owl" in subject_terms("Owl on Branch") and "branch" not in subject_terms("Owl on Branch")
    assert "dog" in subject_terms("Dog 06 Drawn With Straight Lines")
    assert "crawfish" in subject_terms("Crawfish (B and W)")        # "w" is not tungsten here
    assert names_subject("A photo of a great grey owl.", "Owl on Branch")
    assert not names_subject("A photo of a branch.", "Owl on Branch")
    assert subject_terms("in the garden") >= {"garden"}            # a leading preposition cuts nothing


def test_class_name_bounds_known_answers():
    """The photos_val bounds: a subject named among the top-5 class names, or by any class name at all."""
    from types import SimpleNamespace

    import numpy as np

    from eval.photos_val import _class_name_bounds

    names = ["cat", "jeep", "goldfish", "daisy", "violin", "canoe", "pizza"]
    samples = [SimpleNamespace(label=x) for x in ("cat", "fish", "guitar", "pizza")]
    P = np.tile(np.arange(7, 0, -1, dtype=float), (4, 1))   # every photo ranks the classes in list order
    P[1, [0, 2]] = P[1, [2, 0]]                                # the fish photo: goldfish first
    got = _class_name_bounds(P, names, samples)
    # cat (top 1) and fish (goldfish) are named in the top 5; pizza only 7th; no class names a guitar
    assert got == {"bound: a top-5 class name names it": 0.5, "bound: some class name names it": 0.75}


@pytest.mark.slow
def test_the_demo_captions_with_the_classifier_on_the_real_encoders(tmp_path):
    """The demo's caption tab with the real pipeline: the classifier captioner is offered first and names the
    coffee photo (EfficientNet-Lite1's head), its alternatives from the bank given."""
    from captioner.datasets import get_dataset
    from captioner.demo import DemoHandlers
    from captioner.photocaption import ClassifierCaptioner
    from captioner.pipeline import Pipeline

    bank = tmp_path / "bank.txt"
    bank.write_text("A cup of coffee.\nA cat on a sofa.\nA red car.\n")
    photos = {s.id: s.source for s in get_dataset("samples").samples}
    pipe = Pipeline(progress=False)
    h = DemoHandlers(pipe)
    assert h.default_captioner == "classifier" and isinstance(h.classifier, ClassifierCaptioner)
    h.classifier = ClassifierCaptioner(Pipeline, "minilm-l6", bank=str(bank))
    h.classifier.warmup()  # a blank image through the whole path: builds the pipeline once
    cap, rows, timings, status = h.caption(photos["coffee"], top_k=2, captioner="classifier")
    assert status == "" and cap.startswith("A photo of an espresso.  (class probability 0.")  # 0.60 here
    assert rows[0][1] == "A cup of coffee." and len(rows) == 2
    assert "encode" in timings


def test_photos_val_alternatives_count_a_photo_once_one_of_k_names_it():
    """photos_val's `alternatives:` rows: one of the k lines under the caption names the subject, with the
    template copies of one name skipped (then a second name gets in) or kept."""
    from types import SimpleNamespace

    from captioner.bank import CaptionBank, l2n
    from eval.photos_val import _alternatives

    rng = np.random.default_rng(0)
    base = l2n(rng.standard_normal((3, 16)))
    texts = ["A photo of a violin.", "A violin.", "A goldfish.", "A canoe."]
    E = l2n(np.vstack([base[0], base[0] + 0.05 * base[1], 0.9 * base[0] + 0.5 * base[1], base[2]]))
    bank = CaptionBank(texts, E.astype(np.float32), {})
    mu = bank.centered()[0]
    Q = np.vstack([E[0] - mu, E[3] - mu]).astype(np.float32)  # photo 0 nearest the violin, photo 1 the canoe
    samples = [SimpleNamespace(label="fish"), SimpleNamespace(label="canoe")]
    got = _alternatives(Q, bank, samples, k=2)
    # copies skipped: photo 0 lists "A photo of a violin." then "A goldfish." (names the fish); kept: the two
    # violins; photo 1 names its canoe either way
    assert got == {"alternatives: one of 2 names it (copies skipped, as listed)": 1.0,
                   "alternatives: one of 2 names it (template copies kept)": 0.5}
