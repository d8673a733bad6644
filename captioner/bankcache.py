"""The default caption bank as one cached file, so that a warm ``captioner caption`` does not rebuild it.

Building the default bank (``captioner.bank.bank_sets("default")``) lists openclipart's SVGs and checks each
title for an English noun, samples CuPL sentences and merges eight embedding caches: about 0.8 s on 2 idle
cores, most of a warm call (docs/performance.md). The bank is a pure function of

- the text encoder (its fingerprint), the limit and the excluded captions,
- the data it is read from (Tux Paint stamps, openclipart SVGs, GCompris' resource files, the emoji font,
  WordNet, clip-benchmark's and timm's data files): stamped by the path, size and modification time of each
  file and the modification time of each folder (a walk of the folders: tens of milliseconds), and
- the code that turns the data into captions (the modules listed in ``CODE``): stamped by their bytes,

so the file ``$CAPTIONER_HOME/corpus/bank-<key>.safetensors`` named by a hash of all three is reused until one
of them changes. A damaged or half-written file is ignored and rebuilt (the sidecar that makes it valid is
written last, both atomically).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

BANK_FORMAT = 1  # bump when what the cached bank holds changes
CODE = ("bank.py", "bankcache.py", "datasets/__init__.py", "datasets/base.py", "datasets/tuxpaint.py",
        "datasets/emoji.py", "datasets/gcompris.py", "datasets/openclipart.py", "subject.py", "rcc.py", "assets.py")
ASSET_FILES = ("clip_benchmark/datasets/en_classnames.json", "clip_benchmark/datasets/cupl_prompts.json",
               "timm/data/_info/imagenet_synsets.txt", "timm/data/_info/imagenet_synset_to_definition.txt")


def data_paths() -> list[Path]:
    """The files and folders the default bank is read from (those that exist)."""
    from captioner.assets import asset_path
    from captioner.datasets import EMOJI_FONT, GCOMPRIS_RCC, OPENCLIPART_ROOT, TUXPAINT_ROOT
    from captioner.errors import CaptionerError
    from captioner.subject import WORDNET_DIR

    out = [TUXPAINT_ROOT, OPENCLIPART_ROOT, GCOMPRIS_RCC, EMOJI_FONT, WORDNET_DIR]
    for rel in ASSET_FILES:
        try:
            out.append(asset_path(rel))
        except CaptionerError:
            continue
    return [Path(p) for p in out]


def stamp(paths) -> str:
    """A hash of the path, size and modification time (ns) of each file in ``paths`` and of each folder at or
    below each folder in ``paths`` (a folder's time changes when an entry is added, removed or replaced, as a
    package upgrade does; a file edited in place under a folder is not seen); a missing path counts as
    missing (so installing it later changes the stamp)."""
    h = hashlib.sha256()
    for p in map(str, paths):
        if not os.path.exists(p):
            h.update(f"{p}:missing\n".encode())
            continue
        if not os.path.isdir(p):
            st = os.stat(p)
            h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}\n".encode())
            continue
        for folder, dirs, _ in os.walk(p):
            dirs.sort()
            h.update(f"{folder}:{os.stat(folder).st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def code_stamp() -> str:
    """A hash of the bytes of the modules that make the default bank's captions."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in CODE:
        p = here / name
        h.update(name.encode() + b"\x00" + (p.read_bytes() if p.exists() else b"missing") + b"\x00")
    return h.hexdigest()[:16]


def bank_key(fingerprint: dict, limit, exclude) -> str:
    """The name of the cached default bank for this encoder, limit, exclusion list, data and code."""
    from captioner.bank import normalize_caption

    recipe = {"v": BANK_FORMAT, "encoder": fingerprint, "limit": limit, "data": stamp(data_paths()),
              "code": code_stamp(), "exclude": sorted({normalize_caption(c) for c in exclude})}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _load(path: Path, key: str):
    from captioner.bank import CaptionBank

    try:
        from safetensors.numpy import load_file

        meta = json.loads(path.with_suffix(".json").read_text())
        E = load_file(str(path))["E"]
        if meta.get("key") != key or len(meta.get("texts", ())) != len(E) or E.ndim != 2:
            return None
        return CaptionBank(list(meta["texts"]), np.ascontiguousarray(E, np.float32), dict(meta["encoder"]),
                           sources=list(meta["sources"]), dropped=list(meta.get("dropped", [])))
    except Exception:  # noqa: BLE001 - any damage (truncated, not JSON, wrong tensors) means "rebuild"
        return None


def _save(path: Path, key: str, bank) -> None:
    from safetensors.numpy import save

    from captioner.paths import atomic_write_bytes, atomic_write_json

    atomic_write_bytes(path, save({"E": np.ascontiguousarray(bank.E, np.float32)}))
    atomic_write_json(path.with_suffix(".json"), {"key": key, "texts": list(bank.texts), "encoder": bank.text_encoder,
                                                  "sources": list(bank.sources), "dropped": list(bank.dropped)})


def default_bank(encoder, limit=None, exclude=(), progress: bool = True, device: str = "cpu"):
    """The default caption bank (``bank_sets("default", limit)`` minus ``exclude``, embedded with
    ``encoder``, an Encoder), read from its cached file when nothing it is made of has changed, else built
    through the embedding cache and saved."""
    from captioner.bank import bank_sets, build_bank
    from captioner.paths import subdir

    key = bank_key(encoder.fingerprint(), limit, exclude)
    path = subdir("corpus") / f"bank-default-{key}.safetensors"
    hit = _load(path, key)
    if hit is not None:
        return hit
    bank = build_bank(encoder, bank_sets("default", limit), exclude=exclude, progress=progress, device=device)
    _save(path, key, bank)
    return bank
