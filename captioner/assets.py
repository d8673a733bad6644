"""Where the data files of the offline packages lie (label banks, prompt templates, WordNet definitions).

timm and open_clip are installed with ``--target .venv/assets`` rather than into site-packages: we need only
their data files, and an importable timm without torchvision breaks every library that probes for timm
(accelerate, transformers).
"""
from __future__ import annotations

import importlib.util
import json
import sys
from functools import cache
from pathlib import Path

from captioner.errors import CaptionerError


def _roots() -> list[Path]:
    roots = [Path(sys.prefix) / "assets"]
    for name in ("clip_benchmark",):
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            roots.append(Path(list(spec.submodule_search_locations)[0]).parent)
    return roots


def asset_path(relpath: str) -> Path:
    """``asset_path("timm/data/_info/imagenet_synsets.txt")`` -> the file, wherever setup put it."""
    for root in _roots():
        p = root / relpath
        if p.exists():
            return p
    raise CaptionerError(f"data file {relpath!r} not found (looked in {', '.join(map(str, _roots()))}); "
                         "run scripts/setup.sh")


@cache
def load_json(relpath: str):
    with open(asset_path(relpath), encoding="utf-8") as f:
        return json.load(f)


def classnames(label_set: str = "imagenet1k") -> list[str]:
    """A label set from clip-benchmark's ``en_classnames.json`` (17 sets, imagenet1k among them)."""
    names = load_json("clip_benchmark/datasets/en_classnames.json")
    if label_set not in names:
        raise CaptionerError(f"unknown label set {label_set!r}; known: {', '.join(sorted(names))}")
    return list(names[label_set])


def templates(label_set: str = "imagenet1k") -> list[str]:
    """Zero-shot prompt templates ("a photo of a {c}.") from clip-benchmark (imagenet1k has 80)."""
    t = load_json("clip_benchmark/datasets/en_zeroshot_classification_templates.json")
    return list(t.get(label_set) or t["imagenet1k"])


def cupl_prompts() -> dict[str, list[str]]:
    """CuPL: ~150 descriptive sentences for each of the ImageNet classes (clip-benchmark)."""
    data = load_json("clip_benchmark/datasets/cupl_prompts.json")
    return dict(data.get("imagenet1k", data))  # the file nests the classes under "imagenet1k"


@cache
def imagenet_synsets() -> list[str]:
    """The 1000 ImageNet-1k WordNet ids in class-index order (timm's data/_info)."""
    return asset_path("timm/data/_info/imagenet_synsets.txt").read_text().split()


@cache
def synset_definitions() -> dict[str, str]:
    """WordNet id -> gloss (timm's imagenet_synset_to_definition.txt)."""
    out = {}
    for line in asset_path("timm/data/_info/imagenet_synset_to_definition.txt").read_text().splitlines():
        wnid, _, d = line.partition("\t")
        out[wnid.strip()] = d.strip()
    return out
