"""``coco`` (the Karpathy split's ``dataset_coco.json``) and ``coco-official`` (``captions_<split>.json``):
COCO captions from a folder, every malformed entry named in one line with its fix."""
from __future__ import annotations

import json
import os
from pathlib import Path

from captioner.datasets.base import CaptionDataset, Sample, check_split
from captioner.errors import CaptionerError


def _load_json(path: Path, what: str):
    if not path.exists():
        raise CaptionerError(f"{path}: not found; expected {what}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise CaptionerError(f"{path}: not valid JSON ({str(e)[:200]}); expected {what}") from None
    except OSError as e:
        raise CaptionerError(f"{path}: cannot read ({e.strerror}); expected {what}") from None


def _bad_entry(jpath: Path, where: str, problem: str) -> CaptionerError:
    """The one-line error for a malformed dataset entry: the file, the entry, what is wrong, the fix."""
    return CaptionerError(f"{jpath}: {where} {problem}; fix or remove that entry")


def _rel_name(jpath: Path, where: str, value, field_name: str, allow_empty: bool = False) -> str:
    """A file name (or sub-folder) from the JSON: a string, relative, never leaving the dataset root."""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise _bad_entry(jpath, where, f"has {field_name} {value!r}, expected a file name")
    if "\x00" in value or Path(value).is_absolute() or ".." in Path(value).parts:
        raise _bad_entry(jpath, where, f"has {field_name} {value[:80]!r}, which leaves the dataset folder")
    return value


def _karpathy_captions(jpath: Path, where: str, sentences) -> list[str]:
    if not isinstance(sentences, list):
        raise _bad_entry(jpath, where, f"has 'sentences' {str(sentences)[:60]!r}, expected a list of "
                                       '{"raw": "..."} objects')
    caps = []
    for j, x in enumerate(sentences):
        raw = x.get("raw") if isinstance(x, dict) else None
        toks = x.get("tokens") if isinstance(x, dict) else None
        if isinstance(raw, str) and raw.strip():
            caps.append(raw.strip())
        elif isinstance(toks, list) and all(isinstance(t, str) for t in toks):
            caps.append(" ".join(toks).strip())
        elif not (isinstance(x, dict) and (raw is None or isinstance(raw, str)) and toks is None):
            raise _bad_entry(jpath, f"{where}.sentences[{j}]", "has no 'raw' string (nor a 'tokens' list of "
                                                               "strings)")
    return [c for c in caps if c]


def coco_karpathy(root: str | os.PathLike, split: str = "test", json_name: str = "dataset_coco.json",
                  check_files: bool = True) -> CaptionDataset:
    """COCO captions in the Karpathy split format: ``root/dataset_coco.json`` (``{"images": [{"filepath",
    "filename", "split", "sentences": [{"raw"}], "cocoid"}]}``) with images under ``root/<filepath>/``
    (or ``root/images/<filepath>/``). ``restval`` counts as train, as in the Karpathy split."""
    check_split("coco", split)
    root = Path(root)
    jpath = root / json_name if (root / json_name).exists() else root / "annotations" / json_name
    data = _load_json(jpath, 'the Karpathy split JSON: {"images": [{"filename", "split", "sentences": [...]}]}')
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CaptionerError(f"{jpath}: wrong shape: expected an object with an 'images' list "
                             "(the Karpathy dataset_coco.json)")
    out, skipped = [], []
    for i, im in enumerate(data["images"]):
        if not isinstance(im, dict) or "filename" not in im or "sentences" not in im:
            raise CaptionerError(f"{jpath}: images[{i}] lacks 'filename' or 'sentences'; "
                                 "is this the Karpathy dataset_coco.json?")
        where = f"images[{i}]"
        if not isinstance(im.get("split"), str):
            raise _bad_entry(jpath, where, f"has split {im.get('split')!r}, expected train/val/test/restval")
        s = "train" if im["split"] == "restval" else im["split"]
        if split != "all" and s != split:
            continue
        caps = _karpathy_captions(jpath, where, im["sentences"])
        sid = im.get("cocoid", im.get("imgid", i))
        if not isinstance(sid, (int, str)) or isinstance(sid, bool):
            raise _bad_entry(jpath, where, f"has cocoid {sid!r}, expected a number")
        sid = str(sid)
        if not caps:
            skipped.append((sid, "no non-empty caption"))
            continue
        fp = _rel_name(jpath, where, im.get("filepath", ""), "filepath", allow_empty=True)
        name = _rel_name(jpath, where, im["filename"], "filename")
        cands = [root / fp / name, root / "images" / fp / name, root / name]
        path = next((c for c in cands if c.exists()), cands[0])
        if check_files and not path.exists():
            skipped.append((sid, f"missing image {path}"))
            continue
        out.append(Sample(id=sid, source=str(path), captions=caps))
    if not out:
        raise CaptionerError(f"{jpath}: no usable {split!r} images (skipped {len(skipped)}"
                             + (f", first: {skipped[0][1]}" if skipped else "") + ")")
    return CaptionDataset("coco", split, out, root=str(root), skipped=skipped)


def coco_official(root: str | os.PathLike, split: str = "val2014", check_files: bool = True) -> CaptionDataset:
    """Official COCO captions: ``root/annotations/captions_<split>.json`` (``{"images": [{"id",
    "file_name"}], "annotations": [{"image_id", "caption"}]}``) with images in ``root/<split>/``."""
    root = Path(root)
    jpath = root / "annotations" / f"captions_{split}.json"
    if not jpath.exists() and (root / f"captions_{split}.json").exists():
        jpath = root / f"captions_{split}.json"
    data = _load_json(jpath, f"COCO captions_{split}.json with 'images' and 'annotations'")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations"), list):
        raise CaptionerError(f"{jpath}: wrong shape: expected 'images' and 'annotations' lists "
                             "(an official COCO captions file)")
    caps: dict = {}
    for j, a in enumerate(data["annotations"]):
        iid = a.get("image_id") if isinstance(a, dict) else None
        if not isinstance(iid, int) or isinstance(iid, bool):
            raise _bad_entry(jpath, f"annotations[{j}]", f"has image_id {iid!r}, expected the number of an image")
        c = a.get("caption")
        if not isinstance(c, str):
            raise _bad_entry(jpath, f"annotations[{j}]", f"has caption {str(c)[:60]!r}, expected a string")
        if c.strip():
            caps.setdefault(iid, []).append(c.strip())
    out, skipped = [], []
    for i, im in enumerate(data["images"]):
        sid = im.get("id") if isinstance(im, dict) else None
        if not isinstance(sid, int) or isinstance(sid, bool):
            raise _bad_entry(jpath, f"images[{i}]", f"has id {sid!r}, expected a number")
        name = _rel_name(jpath, f"images[{i}]", im.get("file_name"), "file_name")
        path = root / split / name
        if not path.exists() and (root / name).exists():
            path = root / name
        if sid not in caps:
            skipped.append((str(sid), "no caption"))
        elif check_files and not path.exists():
            skipped.append((str(sid), f"missing image {path}"))
        else:
            out.append(Sample(id=str(sid), source=str(path), captions=caps[sid]))
    if not out:
        raise CaptionerError(f"{jpath}: no usable images (skipped {len(skipped)})")
    return CaptionDataset("coco-official", split, out, root=str(root), skipped=skipped)

