"""Datasets: the embedded sets (Tux Paint stamps, Noto emoji, sample photos) and the real formats
(COCO Karpathy ``dataset_coco.json``, official COCO ``captions_*.json``, ImageNet-100 folders, a plain
image folder). Each yields ``Sample(id, source, captions, label)``; images load lazily via
``captioner.images.load_image``."""
from __future__ import annotations

import hashlib
import io
import json
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from captioner.errors import CaptionerError

TUXPAINT_ROOT = Path("/usr/share/tuxpaint/stamps")
EMOJI_FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
DATA_DIR = Path(__file__).parent / "data"
IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ppm"}
SPLITS = ("train", "val", "test")


@dataclass
class Sample:
    id: str
    source: object  # image path (str) or a zero-argument renderer returning a PIL image
    captions: list[str]
    label: str | None = None


@dataclass
class CaptionDataset:
    name: str
    split: str
    samples: list[Sample]
    labels: list[str] | None = None
    root: str | None = None
    skipped: list = field(default_factory=list)  # (id, reason) of entries dropped while loading

    def __len__(self):
        return len(self.samples)

    def captions(self) -> list[str]:
        return [c for s in self.samples for c in s.captions]

    def key(self) -> str:
        """A short hash of what the split contains (ids and captions): part of every cache key."""
        h = hashlib.sha256()
        for s in self.samples:
            h.update(s.id.encode())
            h.update(b"\x00".join(c.encode() for c in s.captions))
            h.update(b"\x01")
        return h.hexdigest()[:12]


def split_of(key: str, seed: int = 0, fractions=(0.7, 0.1, 0.2)) -> str:
    """Deterministic split by hashing ``key`` with ``seed``: the same caption always lands in the same split
    on every machine, and one caption never appears in two splits."""
    u = int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "train" if u < fractions[0] else "val" if u < fractions[0] + fractions[1] else "test"


def _check_split(name: str, split: str, allowed=SPLITS + ("all",)):
    if split not in allowed:
        raise CaptionerError(f"dataset {name!r} has no split {split!r}; choose one of {', '.join(allowed)}")


def _first_caption(txt: Path) -> str:
    with open(txt, encoding="utf-8", errors="replace") as f:
        return f.readline().strip()


@lru_cache(maxsize=4)
def _tuxpaint_all(root: str, include_symbols: bool) -> tuple:
    rootp = Path(root)
    if not rootp.is_dir():
        raise CaptionerError(f"Tux Paint stamps not found at {rootp}; run scripts/setup.sh "
                             "(apt-get install tuxpaint-stamps-default)")
    out = []
    for png in sorted(rootp.rglob("*.png")):
        if png.stem.endswith("_mirror"):
            continue  # Tux Paint's pre-flipped duplicates
        rel = png.relative_to(rootp)
        category = rel.parts[0]
        if category == "symbols" and not include_symbols:
            continue
        txt = png.with_suffix(".txt")
        cap = _first_caption(txt) if txt.exists() else ""
        if not cap:
            continue
        out.append(Sample(id=str(rel.with_suffix("")), source=str(png), captions=[cap], label=category))
    return tuple(out)


def tuxpaint(split: str = "test", root: str | os.PathLike = TUXPAINT_ROOT, seed: int = 0,
             include_symbols: bool = False) -> CaptionDataset:
    """The embedded image-caption set: Tux Paint stamps (real photo cut-outs, composited on white), the
    first line of each stamp's ``.txt`` as caption, the top-level folder as category. Split 70/10/20 by
    caption (seeded hash), so a caption shared by two stamps never crosses splits."""
    _check_split("tuxpaint", split)
    samples = list(_tuxpaint_all(str(root), include_symbols))
    if split != "all":
        samples = [s for s in samples if split_of(s.captions[0].lower(), seed) == split]
    labels = sorted({s.label for s in _tuxpaint_all(str(root), include_symbols)})
    return CaptionDataset("tuxpaint", split, samples, labels=labels, root=str(root))


class EmojiRenderer:
    """Renders one emoji with Noto Color Emoji (a bitmap font: size 109 only) on white."""

    def __init__(self, ch: str, font_path: str = str(EMOJI_FONT), size: int = 136):
        self.ch, self.font_path, self.size = ch, font_path, size
        self.__name__ = f"emoji U+{ord(ch):04X}"

    def __call__(self):
        from PIL import Image, ImageDraw

        font = _emoji_font(self.font_path)
        im = Image.new("RGB", (self.size, self.size), (255, 255, 255))
        ImageDraw.Draw(im).text((self.size // 2, self.size // 2), self.ch, font=font, embedded_color=True,
                                anchor="mm")
        return im


@lru_cache(maxsize=2)
def _emoji_font(path: str):
    from PIL import ImageFont

    return ImageFont.truetype(path, 109)


def _emoji_codepoints(font_path: str) -> list[str]:
    """Single-codepoint emoji the font has a glyph for, with a Unicode name."""
    try:

        font = _emoji_font(font_path)
    except OSError:
        raise CaptionerError(f"emoji font not found at {font_path}; run scripts/setup.sh "
                             "(apt-get install fonts-noto-color-emoji)") from None
    chars = []
    ranges = [(0x1F000, 0x1FAFF), (0x2000, 0x2BFF), (0x3030, 0x303D), (0x3297, 0x3299)]
    for lo, hi in ranges:
        for cp in range(lo, hi + 1):
            ch = chr(cp)
            name = unicodedata.name(ch, "")
            if not name:
                continue
            try:
                if font.getmask(ch).getbbox() is None:
                    continue
            except (OSError, ValueError):
                continue
            chars.append(ch)
    return chars


@lru_cache(maxsize=2)
def _emoji_all(font_path: str) -> tuple:
    """``_emoji_codepoints`` kept under ``$CAPTIONER_HOME/corpus`` (rendering 5,312 glyphs to find them takes
    ~1.6 s), keyed by the font file's hash, PIL's version and the Unicode database's version."""
    import json

    import PIL

    from captioner.encoders.base import hash_files
    from captioner.paths import atomic_write_json, subdir

    key = hashlib.sha256(json.dumps([hash_files([font_path]), PIL.__version__, unicodedata.unidata_version])
                         .encode()).hexdigest()[:16]
    path = subdir("corpus") / f"emoji-codepoints-{key}.json"
    try:
        return tuple(chr(c) for c in json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    chars = _emoji_codepoints(font_path)
    try:
        atomic_write_json(path, [ord(c) for c in chars])
    except OSError:
        pass  # an optimisation only
    return tuple(chars)


def emoji(split: str = "test", font_path: str | os.PathLike = EMOJI_FONT, seed: int = 0) -> CaptionDataset:
    """The fast test set: single-codepoint Noto Color Emoji rendered on white; caption = the lower-cased
    Unicode name ("grinning face"). Split 70/10/20 by seeded hash of the name."""
    _check_split("emoji", split)
    if not Path(font_path).exists():
        raise CaptionerError(f"emoji font not found at {font_path}; run scripts/setup.sh "
                             "(apt-get install fonts-noto-color-emoji)")
    samples = []
    for ch in _emoji_all(str(font_path)):
        name = unicodedata.name(ch).lower()
        if split != "all" and split_of(name, seed) != split:
            continue
        samples.append(Sample(id=f"U+{ord(ch):04X}", source=EmojiRenderer(ch, str(font_path)), captions=[name]))
    return CaptionDataset("emoji", split, samples, root=str(font_path))


# Hand-written captions of the photos scikit-image ships (smoke tests and demo examples).
SAMPLE_PHOTOS = {
    "astronaut": "An astronaut in a white space suit with an American flag.",
    "chelsea": "A tabby cat looking to the side.",
    "coffee": "A cup of coffee on a saucer with a spoon.",
    "rocket": "A rocket on a launch pad.",
    "motorcycle_left": "A red motorcycle parked in a garage.",
    "cat": "A cat sitting and looking at the camera.",
    "hubble_deep_field": "Galaxies in deep space seen by a telescope.",
    "immunohistochemistry": "A stained tissue sample under a microscope.",
}
# The scikit-image loader of each photo whose id is not the loader's own name, and which of the arrays it
# returns is the photo (``stereo_motorcycle()`` gives (left, right, disparity)).
SAMPLE_LOADERS = {"motorcycle_left": ("stereo_motorcycle", 0)}


def samples(split: str = "all") -> CaptionDataset:
    """A few real photos (scikit-image's sample data) with hand-written captions, saved once as PNG."""
    from captioner.paths import atomic_write_bytes, subdir

    try:
        import skimage.data as skd
    except ImportError:
        raise CaptionerError("scikit-image is not installed; run scripts/setup.sh") from None
    from PIL import Image

    folder = subdir("sample-photos")
    out = []
    for name, cap in SAMPLE_PHOTOS.items():
        path = folder / f"{name}.png"
        if not path.exists():
            loader, index = SAMPLE_LOADERS.get(name, (name, 0))
            fn = getattr(skd, loader, None)
            if fn is None:  # an older or newer scikit-image without this photo
                continue
            try:
                a = fn()
            except Exception:  # noqa: BLE001 - a photo scikit-image would have to download: skip it
                continue
            if isinstance(a, tuple):  # stereo pairs etc.
                a = a[index]
            a = np.asarray(a)
            if a.dtype != np.uint8:  # PNG wants 8-bit (or 16-bit) integers
                a = np.clip(a * 255.0 if a.dtype.kind == "f" and a.max() <= 1.0 else a, 0, 255).astype(np.uint8)
            buf = io.BytesIO()  # a temp file of this process's own, renamed: writers at once never collide
            Image.fromarray(a).save(buf, format="PNG")
            atomic_write_bytes(path, buf.getvalue())
        out.append(Sample(id=name, source=str(path), captions=[cap]))
    return CaptionDataset("samples", split, out, root=str(folder))


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
    _check_split("coco", split)
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


def imagenet100_classes() -> list[tuple[str, str]]:
    """The standard ImageNet-100 subset (Tian et al., CMC 2019) as (wnid, class name), from
    ``captioner/data/imagenet100.txt``."""
    path = DATA_DIR / "imagenet100.txt"
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        wnid, _, name = line.partition("\t") if "\t" in line else line.partition(" ")
        rows.append((wnid.strip(), name.strip() or wnid.strip()))
    return rows


def image_folder(root: str | os.PathLike, split: str = "val", classes: list[tuple[str, str]] | None = None,
                 name: str = "folder") -> CaptionDataset:
    """Images in class sub-folders: ``root/<split>/<class>/*.jpg`` (or ``root/<class>/*.jpg``). The label is
    the class name; the caption "a photo of a <name>." unless a sidecar ``.txt`` gives one."""
    root = Path(root)
    base = root / split if (root / split).is_dir() else root
    if not base.is_dir():
        raise CaptionerError(f"{root}: not a folder; expected {root}/{split}/<class>/<image files>")
    if classes is None:
        try:
            classes = [(d.name, d.name.replace("_", " ")) for d in sorted(base.iterdir()) if d.is_dir()]
        except OSError as e:
            raise CaptionerError(f"{base}: cannot list the folder ({e.strerror}); fix its permissions") from None
    out, skipped = [], []
    for wnid, cname in classes:
        d = base / wnid
        if not d.is_dir():
            skipped.append((wnid, f"missing class folder {d}"))
            continue
        try:
            files = sorted(d.iterdir())
        except OSError as e:
            raise CaptionerError(f"{d}: cannot list the class folder ({e.strerror}); fix its permissions or "
                                 "remove it") from None
        for f in files:
            if f.suffix.lower() not in IMAGE_EXTS:
                continue
            txt = f.with_suffix(".txt")
            try:
                cap = _first_caption(txt) if txt.is_file() else f"a photo of a {cname}."
            except OSError as e:
                raise CaptionerError(f"{txt}: cannot read the caption ({e.strerror}); fix or remove it") from None
            out.append(Sample(id=f"{wnid}/{f.stem}", source=str(f), captions=[cap or f"a photo of a {cname}."],
                              label=cname))
    if not out:
        raise CaptionerError(f"{base}: no images found in class folders"
                             + (f" (first problem: {skipped[0][1]})" if skipped else ""))
    return CaptionDataset(name, split, out, labels=[c for _, c in classes], root=str(root), skipped=skipped)


def imagenet100(root: str | os.PathLike, split: str = "val") -> CaptionDataset:
    """ImageNet-100: ``root/<split>/<wnid>/*.JPEG`` for the 100 WordNet ids of the standard subset."""
    classes = imagenet100_classes()
    base = Path(root) / split if (Path(root) / split).is_dir() else Path(root)
    if base.is_dir() and not any((base / w).is_dir() for w, _ in classes):
        raise CaptionerError(f"{base}: none of the 100 ImageNet-100 class folders (e.g. {classes[0][0]}/) exist; "
                             "point --root at the folder holding train/ and val/")
    return image_folder(root, split, classes=classes, name="imagenet100")


def _lazy(name: str) -> Callable:
    """A loader of ``captioner.photosets`` by name: a plug-in of this registry, imported on first use (it
    builds on this module, which therefore does not import it)."""
    def load(*a, **kw):
        import importlib

        return getattr(importlib.import_module("captioner.photosets"), name)(*a, **kw)
    load.__name__ = name
    return load


def _world(split: str = "test", seed: int = 0, **kw) -> CaptionDataset:
    """The JEPA world (``captioner.world.data``): seeded train / val / test splits of its scenes."""
    from captioner.world.data import world_samples

    samples = [Sample(*t) for t in world_samples(split, seed=seed, **kw)]
    return CaptionDataset("world", split, samples, labels=sorted({s.label for s in samples}))


DATASETS: dict[str, tuple[Callable, str]] = {
    "tuxpaint": (tuxpaint, "Tux Paint stamps with English captions and 15 categories (embedded)"),
    "emoji": (emoji, "Noto Color Emoji renders named by Unicode (embedded, fast)"),
    "samples": (samples, "scikit-image sample photos with hand-written captions (embedded)"),
    "coco": (coco_karpathy, "COCO Karpathy split: --root with dataset_coco.json and the images"),
    "coco-official": (coco_official, "official COCO captions_<split>.json: --root, --split val2014"),
    "imagenet100": (imagenet100, "ImageNet-100 class folders: --root with <split>/<wnid>/"),
    "folder": (image_folder, "any image folder with class sub-folders: --root"),
    "gcompris": (_lazy("gcompris"), "GCompris' labelled real photos (Debian gcompris-qt-data), split by label"),
    "openclipart": (_lazy("openclipart"), "openclipart object drawings with titles (Debian openclipart-svg)"),
    "world": (_world, "the JEPA world: clean renders of generated scenes with their captions (seeded scene splits)"),
}


def get_dataset(name: str, split: str = "test", root: str | os.PathLike | None = None, **kw) -> CaptionDataset:
    """Load dataset ``name`` (see ``DATASETS``) for ``split``; ``root`` for those that live on disk."""
    if name not in DATASETS:
        raise CaptionerError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    fn = DATASETS[name][0]
    if name in ("coco", "coco-official", "imagenet100", "folder"):
        if root is None:
            raise CaptionerError(f"dataset {name!r} needs --root DIR ({DATASETS[name][1]})")
        return fn(root, split, **kw)
    if root is not None:
        kw["font_path" if name == "emoji" else "root"] = root
    if name == "samples":
        return fn(split)
    return fn(split, **kw)
