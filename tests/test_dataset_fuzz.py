"""Malformed datasets: every field of the COCO Karpathy json, the official COCO captions json and image folders
is checked; seeded mutations never let anything but a one-line CaptionerError escape."""
from __future__ import annotations

import json
import os
import random

import pytest
from PIL import Image

from captioner.datasets import CaptionDataset, coco_karpathy, coco_official, image_folder
from captioner.errors import CaptionerError
from tests.reliability_fakes import mutate

KARPATHY = {"images": [
    {"filepath": "val2014", "filename": "a.jpg", "split": "test", "cocoid": 1,
     "sentences": [{"raw": "A cat on a mat.", "tokens": ["a", "cat"]}, {"raw": "A cat."}]},
    {"filepath": "val2014", "filename": "b.jpg", "split": "restval", "imgid": 2,
     "sentences": [{"tokens": ["a", "dog"]}]},
]}
OFFICIAL = {"images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
            "annotations": [{"image_id": 1, "caption": "A cat on a mat."}, {"image_id": 2, "caption": "A dog."},
                            {"image_id": 2, "caption": "  "}]}


@pytest.fixture
def root(tmp_path):
    for d in ("val2014", "annotations"):
        (tmp_path / d).mkdir()
    for n in ("a.jpg", "b.jpg"):
        Image.new("RGB", (8, 8)).save(tmp_path / "val2014" / n)
    return tmp_path


def _load(fn, *args, **kw):
    """None or the dataset; fails the test on anything but a one-line CaptionerError."""
    try:
        ds = fn(*args, **kw)
    except CaptionerError as e:
        assert "\n" not in str(e) and str(e), repr(e)
        return None
    assert isinstance(ds, CaptionDataset) and all(s.captions for s in ds.samples)
    return ds


def test_valid_inputs_load(root):
    (root / "dataset_coco.json").write_text(json.dumps(KARPATHY))
    (root / "annotations" / "captions_val2014.json").write_text(json.dumps(OFFICIAL))
    assert [s.captions for s in coco_karpathy(root, "all").samples] == [["A cat on a mat.", "A cat."], ["a dog"]]
    assert [s.captions for s in coco_official(root).samples] == [["A cat on a mat."], ["A dog."]]


@pytest.mark.parametrize("entry, expect", [
    ({"sentences": "a cat"}, r"images\[0\] has 'sentences' 'a cat'"),
    ({"sentences": [{"raw": None, "tokens": 5}]}, r"images\[0\].sentences\[0\] has no 'raw'"),
    ({"split": None}, r"images\[0\] has split None"),
    ({"filename": "../../etc/passwd"}, "leaves the dataset folder"),
    ({"filename": 7}, "has filename 7"),
    ({"cocoid": [1]}, "has cocoid"),
])
def test_karpathy_field_errors_name_file_entry_and_fix(root, entry, expect):
    data = json.loads(json.dumps(KARPATHY))
    data["images"][0].update(entry)
    (root / "dataset_coco.json").write_text(json.dumps(data))
    with pytest.raises(CaptionerError, match=expect) as e:
        coco_karpathy(root, "all")
    assert str(root / "dataset_coco.json") in str(e.value) and "fix or remove that entry" in str(e.value)


@pytest.mark.parametrize("where, entry, expect", [
    ("images", {"id": "1"}, r"images\[0\] has id '1'"),
    ("images", {"file_name": None}, r"images\[0\] has file_name None"),
    ("annotations", {"image_id": None}, r"annotations\[0\] has image_id None"),
    ("annotations", {"caption": ["x"]}, r"annotations\[0\] has caption"),
])
def test_official_field_errors(root, where, entry, expect):
    data = json.loads(json.dumps(OFFICIAL))
    data[where][0].update(entry)
    (root / "annotations" / "captions_val2014.json").write_text(json.dumps(data))
    with pytest.raises(CaptionerError, match=expect):
        coco_official(root)
    data[where][0] = "a string"
    (root / "annotations" / "captions_val2014.json").write_text(json.dumps(data))
    with pytest.raises(CaptionerError, match=rf"{where}\[0\]"):
        coco_official(root)


def test_fuzzed_coco_files_raise_only_one_line_errors(root):
    rng = random.Random(0)
    kj, oj = root / "dataset_coco.json", root / "annotations" / "captions_val2014.json"
    loaded = refused = 0
    for k in range(300):
        base, path, fn = (KARPATHY, kj, lambda: coco_karpathy(root, "all")) if k % 2 else \
            (OFFICIAL, oj, lambda: coco_official(root))
        data = base
        for _ in range(rng.randint(1, 3)):
            data = mutate(data, rng)
        text = json.dumps(data)
        if k % 25 == 0:  # now and then a damaged file rather than a damaged value
            text = text[: rng.randint(0, len(text))] if k % 50 else "\ufeff" + text
        path.write_text(text, encoding="utf-8")
        if _load(fn) is None:
            refused += 1
        else:
            loaded += 1
    assert loaded > 20 and refused > 50  # both outcomes exercised


def test_hostile_image_folders(tmp_path):
    base = tmp_path / "val"
    (base / "cat").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(base / "cat" / "a.png")
    (base / "cat" / "a.txt").write_bytes(b"\xff\xfe a cat \x00\n")  # not UTF-8: replaced, not a crash
    (base / "cat" / "dir.png").mkdir()  # a folder named like an image
    (base / "cat" / "dir.txt").mkdir()
    os.mkfifo(base / "cat" / "pipe.png")
    (base / "cat" / "loop.png").symlink_to(base / "cat" / "loop.png")
    (base / "cat" / "dangling.png").symlink_to(tmp_path / "nowhere.png")
    (base / "dog").symlink_to(base / "dog")  # a class folder that is a symlink loop
    ds = _load(image_folder, tmp_path, "val")
    assert ds is not None and "cat/a" in [s.id for s in ds.samples]
    from captioner.cache import embed
    from tests.fakes import FakeImageEncoder

    os.environ.setdefault("CAPTIONER_HOME", str(tmp_path / "home"))
    es = embed(FakeImageEncoder(), ds, progress=False, out=tmp_path / "c.safetensors")
    assert es.ids == ["cat/a"]  # the others are one-line skips: folder, FIFO, loop, dangling link
    reasons = " | ".join(r for _, r in es.meta["skipped"])
    assert "not a regular file" in reasons and "symbolic link loop" in reasons and "file not found" in reasons
    assert _load(image_folder, tmp_path / "nothing", "val") is None
