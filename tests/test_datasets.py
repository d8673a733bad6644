import json
import os

import pytest
from PIL import Image

from captioner.datasets import (
    coco_karpathy,
    coco_official,
    get_dataset,
    imagenet100,
    imagenet100_classes,
    split_of,
)
from captioner.errors import CaptionerError

HAS_TUX = os.path.isdir("/usr/share/tuxpaint/stamps")


@pytest.mark.skipif(not HAS_TUX, reason="tuxpaint-stamps-default not installed (scripts/setup.sh)")
def test_tuxpaint_splits_are_disjoint_by_caption_and_cover_all():
    parts = {s: get_dataset("tuxpaint", s) for s in ("train", "val", "test")}
    allset = get_dataset("tuxpaint", "all")
    assert sum(len(p) for p in parts.values()) == len(allset) == 538
    caps = {s: {c.lower() for c in p.captions()} for s, p in parts.items()}
    assert not caps["train"] & caps["test"] and not caps["train"] & caps["val"] and not caps["val"] & caps["test"]
    assert len(parts["train"]) > 3 * len(parts["test"]) > 0
    assert len(allset.labels) == 15 and "animals" in allset.labels
    s = parts["test"].samples[0]
    assert s.label in allset.labels and s.captions[0] and os.path.exists(s.source)


def test_split_is_deterministic():
    assert split_of("A koala.", 0) == split_of("A koala.", 0)
    got = [split_of(f"caption {i}") for i in range(2000)]
    assert 0.65 < got.count("train") / 2000 < 0.75 and 0.17 < got.count("test") / 2000 < 0.23


def _jpg(path, color=(200, 10, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 12), color).save(path)


def test_coco_karpathy_fixture(tmp_path):
    images = []
    for i, split in enumerate(["train", "restval", "val", "test", "test"]):
        fn = f"COCO_val2014_{i:012d}.jpg"
        if i != 4:  # the last one is missing on disk: skipped and counted
            _jpg(tmp_path / "val2014" / fn)
        images.append({"filepath": "val2014", "filename": fn, "split": split, "cocoid": 100 + i, "imgid": i,
                       "sentences": [{"raw": f"A photo number {i}.", "tokens": []}, {"raw": " "}]})
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"images": images, "dataset": "coco"}))
    test = coco_karpathy(tmp_path, "test")
    assert [s.id for s in test.samples] == ["103"] and test.samples[0].captions == ["A photo number 3."]
    assert len(test.skipped) == 1 and "missing image" in test.skipped[0][1]
    assert [s.id for s in coco_karpathy(tmp_path, "train").samples] == ["100", "101"]  # restval counts as train
    (tmp_path / "dataset_coco.json").write_text(json.dumps([1, 2]))
    with pytest.raises(CaptionerError, match="wrong shape"):
        coco_karpathy(tmp_path, "test")


def test_coco_official_fixture(tmp_path):
    _jpg(tmp_path / "val2014" / "a.jpg")
    _jpg(tmp_path / "val2014" / "b.jpg")
    ann = {"images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
           "annotations": [{"image_id": 1, "caption": "A red square."}, {"image_id": 1, "caption": "Red."},
                           {"image_id": 2, "caption": ""}]}
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "captions_val2014.json").write_text(json.dumps(ann))
    ds = coco_official(tmp_path, "val2014")
    assert len(ds) == 1 and ds.samples[0].captions == ["A red square.", "Red."] and ds.skipped == [("2", "no caption")]


def test_imagenet100_fixture(tmp_path):
    classes = imagenet100_classes()
    assert len(classes) == 100 and len({w for w, _ in classes}) == 100 and all(w.startswith("n") for w, _ in classes)
    for wnid, _ in classes[:2]:
        _jpg(tmp_path / "val" / wnid / f"{wnid}_1.JPEG")
    ds = imagenet100(tmp_path, "val")
    assert len(ds) == 2 and ds.samples[0].label == classes[0][1] and len(ds.labels) == 100
    (tmp_path / "other" / "val" / "cats").mkdir(parents=True)
    with pytest.raises(CaptionerError, match="none of the 100"):
        imagenet100(tmp_path / "other", "val")
    with pytest.raises(CaptionerError, match="not a folder"):
        imagenet100(tmp_path / "missing", "val")


def test_unknown_dataset_and_split():
    with pytest.raises(CaptionerError, match="unknown dataset"):
        get_dataset("nope")
    with pytest.raises(CaptionerError, match="no split"):
        get_dataset("tuxpaint", "dev")
    with pytest.raises(CaptionerError, match="needs --root"):
        get_dataset("coco")


@pytest.mark.skipif(not os.path.exists("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf"), reason="no emoji font")
def test_emoji_renders_with_names():
    ds = get_dataset("emoji", "all")
    assert len(ds) > 1300
    names = {s.captions[0] for s in ds.samples}
    assert "grinning face" in names
    from captioner.images import load_image

    im = load_image(ds.samples[0].source)
    assert im.size == (136, 136) and im.getpixel((0, 0)) == (255, 255, 255)


def test_sample_photos_include_the_left_motorcycle(captioner_home):
    """``stereo_motorcycle()`` returns (left, right, disparity): the photo is the left image, saved as PNG
    under the home folder like the others, and a cached copy is reused."""
    skd = pytest.importorskip("skimage.data")
    import numpy as np

    from captioner.datasets import SAMPLE_PHOTOS, samples

    ds = samples()
    by_id = {s.id: s for s in ds.samples}
    assert set(by_id) == set(SAMPLE_PHOTOS)  # every listed photo exists with this scikit-image
    moto = by_id["motorcycle_left"]
    assert moto.source == str(captioner_home / "sample-photos" / "motorcycle_left.png")
    with Image.open(moto.source) as im:
        assert im.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(im), skd.stereo_motorcycle()[0])
    assert moto.captions == [SAMPLE_PHOTOS["motorcycle_left"]]
    mtime = os.stat(moto.source).st_mtime_ns
    assert {s.id: s.source for s in samples().samples} == {s.id: s.source for s in ds.samples}
    assert os.stat(moto.source).st_mtime_ns == mtime  # written once, not on every call
    assert not list((captioner_home / "sample-photos").glob("*.tmp.png"))
