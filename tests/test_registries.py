"""The registries (encoders, datasets, captioners, pair-free matchers): each is the one list its users read,
an unknown name is one line naming the known ones, and adding an entry is one registration (shown here with
toy entries, used through the public entry points). Plus the public alignment API."""
from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest

from alignment.errors import AlignmentError
from captioner.errors import CaptionerError


def _one_line_listing(message: str, names) -> None:
    assert "\n" not in message
    for n in names:
        assert n in message, (n, message)


# -- unknown names -----------------------------------------------------------------------------------------
def test_an_unknown_encoder_is_one_line_listing_the_registry():
    from captioner.encoders import ENCODERS, get_encoder

    with pytest.raises(CaptionerError) as e:
        get_encoder("no-such-encoder", cache=False)
    assert str(e.value).startswith("unknown encoder 'no-such-encoder'; known: ")
    _one_line_listing(str(e.value), ENCODERS)


def test_an_unknown_dataset_is_one_line_listing_the_registry():
    from captioner.datasets import DATASETS, get_dataset

    with pytest.raises(CaptionerError) as e:
        get_dataset("no-such-set")
    assert str(e.value) == f"unknown dataset 'no-such-set'; known: {', '.join(DATASETS)}"
    with pytest.raises(CaptionerError, match="needs --root"):
        get_dataset("coco")


def test_an_unknown_captioner_is_one_line_listing_the_registry_and_old_names_resolve():
    from captioner.captioners import CAPTIONERS, get_captioner

    with pytest.raises(CaptionerError) as e:
        get_captioner("magic")
    assert str(e.value) == "unknown captioner 'magic'; choose one of classifier, retrieval, decoder"
    _one_line_listing(str(e.value), CAPTIONERS)
    assert get_captioner("rotation").name == "decoder"  # the demo's older name
    with pytest.raises(CaptionerError, match="choose one of retrieval, decoder$"):
        get_captioner("classifier", known=["retrieval", "decoder"])


def test_an_unknown_matcher_is_one_line_listing_the_registry():
    from alignment.pairfree import MATCHERS, match

    X = np.random.default_rng(0).standard_normal((20, 4))
    with pytest.raises(AlignmentError) as e:
        match(X, X, method="no-such-matcher")
    assert str(e.value).startswith("unknown pair-free method 'no-such-matcher'; known: ")
    _one_line_listing(str(e.value), MATCHERS)


# -- the CLI, the demo and eval read the same lists -------------------------------------------------------------
def _choices(command, name):
    return list(next(p for p in command.params if p.name == name).type.choices)


def test_the_cli_choices_are_read_from_the_registries():
    from alignment.pairfree import MATCHERS
    from captioner.captioners import captioner_names
    from captioner.commands import align, caption, evaluate
    from captioner.datasets import dataset_names

    assert _choices(caption.caption_cli, "captioner") == captioner_names() == ["classifier", "retrieval", "decoder"]
    assert _choices(evaluate.coco_cli, "captioner") == captioner_names(uses_rotation=True)
    assert _choices(evaluate.coco_cli, "dataset") == dataset_names("coco") == ["tuxpaint", "world"]
    assert _choices(evaluate.zeroshot_cli, "dataset") == dataset_names("zeroshot") == ["tuxpaint", "imagenet100",
                                                                                        "world"]
    assert _choices(align.fit_cmd, "matcher") == list(MATCHERS)


def test_the_demo_offers_the_registry_captioners_with_their_labels():
    from captioner.captioners import CAPTIONERS, captioner_names
    from captioner.demo import DemoHandlers
    from tests.demo_fakes import FakePipeline

    h = DemoHandlers(FakePipeline())
    assert h.captioners == captioner_names(uses_rotation=True)
    assert all(CAPTIONERS[c].label for c in h.captioners)


# -- adding one is one registration -----------------------------------------------------------------------------
class _LengthEncoder:
    """A toy text encoder: (characters, words, 1) per text."""

    modality, dim, pooling = "text", 3, "none"

    def __init__(self, name):
        self.name = name

    def encode(self, batch):
        return np.array([[len(t), len(t.split()), 1.0] for t in batch], np.float32)  # (N, 3)


@pytest.fixture
def toy_entries():
    from alignment import register_matcher
    from alignment.pairfree import MATCHERS
    from captioner.datasets import CaptionDataset, DatasetSpec, Sample, register_dataset, unregister_dataset
    from captioner.encoders import EncoderSpec, register_encoder, unregister_encoder

    seen = []

    def load(arg, device="cpu", name=None, **kw):
        seen.append((arg, device, name, kw))
        return _LengthEncoder(name)

    def toy_set(split="test", words=("cat", "dog")):
        return CaptionDataset("toy", split, [Sample(f"{split}-{w}", f"{w}.png", [f"a {w}"], w) for w in words],
                              labels=list(words))

    def in_order(X, Y, **kw):
        """Rows paired in the order given, then Procrustes: a matcher for already-aligned rows."""
        from alignment.matching import MatchResult
        from alignment.procrustes import fit_procrustes

        return MatchResult(fit_procrustes(X, Y, center=False), np.arange(len(X)), score=1.0)

    register_encoder(EncoderSpec("toy-length", "text", load, 3, "characters, words, 1 (a test's toy)"))
    register_encoder(EncoderSpec("toy:", "text", load, 3, "a toy prefix entry"))
    register_dataset(DatasetSpec("toy", toy_set, "two captions (a test's toy)", root_kw="words"))
    register_matcher("in-order", in_order, "rows already paired (a test's toy)")
    yield seen
    unregister_encoder("toy-length")
    unregister_encoder("toy:")
    unregister_dataset("toy")
    MATCHERS.pop("in-order", None)


def test_a_registered_encoder_dataset_and_matcher_are_used_through_the_public_entry_points(toy_entries):
    from alignment import match
    from captioner.datasets import get_dataset
    from captioner.encoders import get_encoder, list_encoders

    enc = get_encoder("toy-length", cache=False)
    assert enc.encode(["a red fox", "hi"]).tolist() == [[9, 3, 1], [2, 1, 1]]
    get_encoder("toy:some/path?x=2", cache=False)  # a prefix entry gets what follows the prefix, options parsed
    assert toy_entries[-1] == ("some/path", "cpu", "toy:some/path?x=2", {"x": 2})
    assert {"toy-length", "toy:..."} <= {r["name"] for r in list_encoders()}

    ds = get_dataset("toy", "train")
    assert ds.captions() == ["a cat", "a dog"] and ds.split == "train"
    assert get_dataset("toy", root=("emu",)).captions() == ["a emu"]  # root goes to the entry's keyword

    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 6))
    R = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    res = match(X, X @ R, method="in-order")
    assert np.abs(res.rotation.transform(X) - X @ R).max() < 1e-5 and (res.perm == np.arange(50)).all()


def test_a_name_is_not_registered_twice_silently(toy_entries):
    from alignment import register_matcher
    from captioner.datasets import DATASETS, register_dataset
    from captioner.encoders import ENCODERS, register_encoder

    with pytest.raises(CaptionerError, match="registered already"):
        register_encoder(ENCODERS["toy-length"])
    with pytest.raises(CaptionerError, match="registered already"):
        register_dataset(DATASETS["toy"])
    with pytest.raises(AlignmentError, match="registered already"):
        register_matcher("in-order", None, "again")


# -- the public alignment API ----------------------------------------------------------------------------------
def test_alignment_exports_its_public_names_and_imports_them_on_first_use():
    code = ("import sys, alignment; before = sorted(m for m in sys.modules if m.startswith('alignment.')); "
            "from alignment import match, fit_procrustes, foscttm, metrics, Rotation, load_map, match_gw; "
            "assert alignment.metrics.foscttm is foscttm and alignment.pairfree.match is match; "
            "[getattr(alignment, n) for n in alignment.__all__]; print(before)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # nothing beyond the package itself until a name is read


@pytest.mark.parametrize("module", ["alignment", "alignment.metrics", "alignment.procrustes", "alignment.maps",
                                    "alignment.matching"])
def test_the_alignment_docstring_examples_run(module):
    import importlib

    res = doctest.testmod(importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0
