"""The caption bank: captions of a train split, embedded by the text encoder (through the embedding cache),
that retrieval picks from and the DeCap projection averages over.

A bank must never hold the evaluated images' own captions, or retrieval scores would measure lookup, not
captioning. Tux Paint splits are made by caption, so this holds by construction; ``build_bank`` checks it
anyway (normalised strings: case, spaces and final punctuation ignored) and drops any collision.

Also here: the text corpus the decoder trains on (bank captions plus other embedded text, so that it does
not just memorise a few hundred strings), built through the same cache.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np

from captioner.encoders.base import l2n  # noqa: F401  (re-exported)
from captioner.errors import CaptionerError
from captioner.subject import article, vowel_sound  # noqa: F401  (article re-exported)


def normalize_caption(s: str) -> str:
    """The form two captions are compared in: lower case, single spaces, no final punctuation."""
    return re.sub(r"[\s.!?,;:]+$", "", " ".join(str(s).lower().split()))


@dataclass
class CaptionBank:
    """Unique captions and their unit-norm text embeddings.

    texts : list of M captions (unique after ``normalize_caption``).
    E : (M, D) float32, unit rows.
    text_encoder : fingerprint of the encoder that made ``E``.
    sources : which dataset splits the captions came from, with counts.
    """

    texts: list
    E: np.ndarray
    text_encoder: dict
    sources: list = field(default_factory=list)
    dropped: list = field(default_factory=list)  # captions removed because an evaluated image has them

    def __post_init__(self):
        if len(self.texts) == 0:
            raise CaptionerError("the caption bank is empty: no captions left to retrieve from "
                                 f"(sources: {', '.join(s['name'] for s in self.sources) or 'none'}"
                                 + (f"; {len(self.dropped)} dropped as test captions" if self.dropped else "")
                                 + ")")
        if self.E.shape[0] != len(self.texts):
            raise CaptionerError(f"caption bank: {len(self.texts)} captions but {self.E.shape[0]} embeddings")

    def __len__(self):
        return len(self.texts)

    @property
    def dim(self) -> int:
        return int(self.E.shape[1])

    def centered(self):
        """(mu (D,), Ec (M, D) unit rows of E - mu, r = RMS norm of E - mu): the bank around its own mean.

        Retrieval compares directions around the mean caption: every caption embedding shares a large
        common component, and a query rotated in from image space does not, so raw cosines mostly measure
        that offset."""
        if getattr(self, "_centered", None) is None:
            mu = self.E.mean(0)
            D = self.E - mu
            r = float(np.sqrt((D ** 2).sum(1).mean())) if len(self.E) > 1 else 1.0
            self._centered = (mu.astype(np.float32), l2n(D), r)
        return self._centered

    def key(self) -> str:
        """A short hash of the bank's captions and encoder: part of the names of artifacts fitted on it."""
        h = hashlib.sha256(str(self.text_encoder.get("weights_hash")).encode()
                           + str(self.text_encoder.get("name")).encode())
        for t in self.texts:
            h.update(t.encode() + b"\x00")
        return h.hexdigest()[:12]

    def assert_excludes(self, captions) -> None:
        """Raise if any of ``captions`` (normalised) is in the bank."""
        mine = {normalize_caption(t) for t in self.texts}
        hit = [c for c in captions if normalize_caption(c) in mine]
        if hit:
            raise CaptionerError(f"caption bank holds {len(hit)} caption(s) of the evaluated images "
                                 f"(first: {hit[0]!r}); rebuild it with exclude=")


def bank_from_arrays(texts, E, text_encoder: dict, exclude=(), sources=None) -> CaptionBank:
    """A bank from captions and their embeddings: de-duplicated (first occurrence wins), with every caption
    in ``exclude`` dropped.

    Parameters
    ----------
    texts : N captions; E : (N, D) their embeddings (normalised here).
    exclude : captions that must not be in the bank (the evaluated images' references).
    """
    E = np.asarray(E, np.float32)
    if E.ndim != 2 or E.shape[0] != len(texts):
        raise CaptionerError(f"caption bank: {len(texts)} captions but embeddings of shape {E.shape}")
    banned = {normalize_caption(c) for c in exclude}
    keep, seen, dropped = [], set(), []
    for i, t in enumerate(texts):
        k = normalize_caption(t)
        if not k:
            continue
        if k in banned:
            dropped.append(t)
            continue
        if k in seen:
            continue
        seen.add(k)
        keep.append(i)
    bank = CaptionBank([texts[i] for i in keep], l2n(E[keep]) if keep else np.zeros((0, E.shape[1]), np.float32),
                       dict(text_encoder), sources=list(sources or []), dropped=dropped)
    bank.assert_excludes(exclude)
    return bank


def _text_set(text_encoder, dataset, progress: bool):
    from captioner.cache import embed

    es = embed(text_encoder, dataset, "text", progress=progress)
    texts = es.texts
    if texts is None:  # an older cache without texts: rebuild them from the dataset
        by_id = {f"{s.id}#{j}": c.strip() for s in dataset.samples for j, c in enumerate(s.captions)}
        texts = [by_id[i] for i in es.ids]
    return texts, es.X


def build_bank(text_encoder="minilm-l6", datasets=None, exclude=(), progress: bool = True,
               device: str = "cpu") -> CaptionBank:
    """Embed the captions of ``datasets`` (default: Tux Paint train) with ``text_encoder`` (a registry name
    or an Encoder) through the embedding cache and make a bank of them, minus ``exclude``.

    Parameters
    ----------
    datasets : list of CaptionDataset (or (name, split) pairs for ``get_dataset``).
    exclude : captions of the evaluated images; any found in the bank are dropped, and the result is
        checked to hold none of them.
    """
    from captioner.datasets import get_dataset
    from captioner.encoders import get_encoder

    enc = get_encoder(text_encoder, device=device) if isinstance(text_encoder, str) else text_encoder
    datasets = datasets or [("tuxpaint", "train")]
    texts, Es, sources = [], [], []
    for ds in datasets:
        if isinstance(ds, tuple):
            ds = get_dataset(ds[0], split=ds[1])
        if not ds.captions():
            sources.append({"name": f"{ds.name}/{ds.split}", "n": 0})
            continue
        t, X = _text_set(enc, ds, progress)
        texts += list(t)
        Es.append(X)
        sources.append({"name": f"{ds.name}/{ds.split}", "n": len(t)})
    E = np.concatenate(Es) if Es else np.zeros((0, enc.dim), np.float32)
    return bank_from_arrays(texts, E, enc.fingerprint(), exclude=exclude, sources=sources)


# ---------------------------------------------------------------------------------------------------------
# Decoder corpus
# ---------------------------------------------------------------------------------------------------------

def text_dataset(name: str, split: str, texts: list[str]):
    """A CaptionDataset of bare texts (no images), so extra text goes through the embedding cache."""
    from captioner.datasets import CaptionDataset, Sample

    return CaptionDataset(name, split, [Sample(id=f"t{i}", source=None, captions=[t]) for i, t in enumerate(texts)])


def cupl_sentences(n: int = 6000, seed: int = 0, max_chars: int = 120) -> list[str]:
    """``n`` CuPL sentences (clip-benchmark: ~150 GPT-written descriptions of each ImageNet class), spread
    evenly over the classes, short ones only (captions are short)."""
    from captioner.assets import cupl_prompts

    data = cupl_prompts()
    rng = np.random.default_rng(seed)
    per_class = max(1, int(np.ceil(n / max(1, len(data)))))
    out = []
    for cls in sorted(data):
        sents = [" ".join(s.split()) for s in data[cls] if s and len(s) <= max_chars]
        if not sents:
            continue
        pick = rng.choice(len(sents), size=min(per_class, len(sents)), replace=False)
        out += [sents[i] for i in sorted(pick)]
    rng.shuffle(out)
    return out[:n]


def fix_articles(text: str) -> str:
    """"a" -> "an" before a word with a vowel sound, the slip of many CuPL sentences ("A espresso usually looks
    like ..."); capitals kept, acronyms ("a USB cable") and consonant sounds ("a European") left alone.

    >>> fix_articles("A espresso is a Italian drink in a European cup, a USB mug or a unicorn's.")
    "An espresso is an Italian drink in a European cup, a USB mug or a unicorn's."
    """
    def fix(m):
        word = m.group(2)
        if not vowel_sound(word):
            return m.group(0)
        return ("An " if m.group(1) == "A" else "an ") + word

    return re.sub(r"\b([Aa]) ([A-Za-z][\w'-]*)", fix, text)


_BOILERPLATE = re.compile(r"https?:|www\.|public domain|creative ?commons|released into|licen[cs]e", re.I)
_SERIAL = re.compile(r"(?:\s*#\s*\d+|\s+0\d+|(?:\s+|(?<=[a-z]))\d(?=\s*(?:,|$))|\s+(?:bw|3d))(?=\s|,|$)", re.I)


def clean_title(text: str) -> str | None:
    """A drawing's title as a bank line: underscores to spaces, serial numbers and file-name tags dropped
    ("church building 01" -> "church building", "horse#2" / "Bus1" -> "horse" / "Bus", "glace_2_bw" -> "glace",
    "Habanero Pepper 1, Simple" -> "Habanero Pepper, Simple"); counts before a noun kept ("2 dead frogs",
    "45 rpm record"). None for licence boilerplate or a title with no letters left.

    >>> [clean_title(t) for t in ("Dog 04 Drawn With Straight Lines", "recycling_box_3d", "See www.x.org")]
    ['Dog Drawn With Straight Lines', 'recycling box', None]
    """
    if _BOILERPLATE.search(text):
        return None
    out = " ".join(text.replace("_", " ").split())
    for _ in range(3):  # "glace 2 bw": the tag, then the number before it
        out = _SERIAL.sub("", out).strip(" ,#")
    return out if re.search(r"[A-Za-z]{2}", out) else None


def clean_titles(texts) -> list[str]:
    """:func:`clean_title` of each text, Nones and repeats (case-insensitive) left out, order kept."""
    seen, out = set(), []
    for t in texts:
        c = clean_title(t)
        if c is not None and c.lower() not in seen:
            seen.add(c.lower())
            out.append(c)
    return out


def classname_captions(label_set: str = "imagenet1k") -> list[str]:
    """Short captions of the kind Tux Paint has ("A koala."), one noun each, from a clip-benchmark label
    set: "A <name>." and "A photo of a <name>." for each class."""
    from captioner.assets import classnames

    out = []
    for c in classnames(label_set):
        a = article(c)
        out += [f"{a.capitalize()} {c}.", f"A photo of {a} {c}."]
    return out


CORPUS_FORMAT = 1  # bump when what decoder_corpus computes changes, so that cached corpora are rebuilt


def _corpus_sources(extra: tuple, n_cupl: int) -> list[tuple]:
    """(name, key, make) per corpus source: ``key`` says what the source's texts are made from, cheaply
    (a dataset's content hash; for emoji, which take ~1.6 s to scan, the font file, PIL and the Unicode
    database); ``make()`` builds its CaptionDataset. Sources whose data is missing are left out."""
    import unicodedata

    from captioner.datasets import EMOJI_FONT, get_dataset

    out = []
    if "tuxpaint" in extra:
        for split in ("train", "val"):
            ds = get_dataset("tuxpaint", split=split)
            out.append((f"tuxpaint/{split}", ds.key(), lambda ds=ds: ds))
    if "emoji" in extra and EMOJI_FONT.exists():
        import PIL

        from captioner.encoders.base import hash_files

        key = [hash_files([EMOJI_FONT]), PIL.__version__, unicodedata.unidata_version]
        out.append(("emoji/all", key, lambda: get_dataset("emoji", split="all")))
    if "imagenet" in extra:
        try:
            ds = text_dataset("classnames", "imagenet1k", classname_captions("imagenet1k"))
            out.append(("classnames/imagenet1k", ds.key(), lambda ds=ds: ds))
        except CaptionerError:
            pass  # the asset is optional; the corpus is just smaller without it
    if "cupl" in extra and n_cupl > 0:
        try:  # keyed by the file the sentences are drawn from (drawing them takes ~0.5 s)
            from captioner.assets import asset_path
            from captioner.encoders.base import hash_files

            key = [hash_files([asset_path("clip_benchmark/datasets/cupl_prompts.json")]), n_cupl]
            out.append((f"cupl/sample{n_cupl}", key,
                        lambda: text_dataset("cupl", f"sample{n_cupl}", cupl_sentences(n_cupl))))
        except CaptionerError:
            pass
    return out


def decoder_corpus(text_encoder="minilm-l6", exclude=(), extra: tuple = ("tuxpaint", "emoji", "imagenet", "cupl"),
                   n_cupl: int = 2000, progress: bool = True, device: str = "cpu"):
    """The text the decoder learns to reconstruct: Tux Paint train (+ val) captions, emoji names, short
    captions of the 1000 ImageNet class names, and a sample of CuPL sentences, embedded through the cache,
    minus ``exclude`` (the evaluated captions). The class-name captions teach it to spell many nouns from
    their embeddings, which is what a one-object caption needs; CuPL adds longer sentences.

    The result is cached under ``$CAPTIONER_HOME/corpus``, keyed by the text-encoder fingerprint, each
    source's key (``_corpus_sources``), ``exclude`` and ``CORPUS_FORMAT``: a warm call reads one file
    instead of scanning the emoji font and merging five embedding caches.

    Returns (texts list[str], E (N, D) float32, sources list[dict]).
    """
    import json

    from captioner.encoders import get_encoder
    from captioner.paths import subdir

    enc = get_encoder(text_encoder, device=device) if isinstance(text_encoder, str) else text_encoder
    fp = enc.fingerprint()
    sources = _corpus_sources(tuple(extra), n_cupl)
    recipe = {"v": CORPUS_FORMAT, "encoder": fp, "sources": [[n, k] for n, k, _ in sources],
              "exclude": sorted({normalize_caption(c) for c in exclude})}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = subdir("corpus") / f"decoder-corpus-{key}.safetensors"
    hit = _load_corpus(path, key)
    if hit is not None:
        return hit
    bank = build_bank(enc, [make() for _, _, make in sources], exclude=exclude, progress=progress)
    _save_corpus(path, key, bank)
    return bank.texts, bank.E, bank.sources


def _load_corpus(path, key: str):
    """(texts, E, sources) from a cached corpus file, or None when absent or unreadable."""
    import json

    side = path.with_suffix(".json")
    try:
        from safetensors.numpy import load_file

        meta = json.loads(side.read_text())
        E = load_file(str(path))["E"]
    except (OSError, ValueError, KeyError):
        return None
    if meta.get("key") != key or len(meta.get("texts", ())) != len(E):
        return None
    return list(meta["texts"]), E, list(meta["sources"])


def _save_corpus(path, key: str, bank: CaptionBank) -> None:
    """Write the corpus (embeddings first, then the sidecar that makes it valid), atomically."""
    from safetensors.numpy import save

    from captioner.paths import atomic_write_bytes, atomic_write_json

    atomic_write_bytes(path, save({"E": np.ascontiguousarray(bank.E, np.float32)}))
    atomic_write_json(path.with_suffix(".json"), {"key": key, "texts": list(bank.texts),
                                                  "sources": list(bank.sources)})


# ---------------------------------------------------------------------------------------------------------
# The default caption bank for everyday photos, and user banks
# ---------------------------------------------------------------------------------------------------------

DEFAULT_BANK_LIMIT = 20_000  # the default bank's size (see docs/results/captions.md for the measurement)
MAX_BANK_BYTES = 2 << 30  # a user bank whose embeddings would pass this is refused (suggest --bank-limit)


def wordnet_gloss_captions() -> list[str]:
    """ "<class name>, <WordNet gloss>." for each ImageNet-1k class (timm's data files)."""
    from captioner.assets import classnames, imagenet_synsets, synset_definitions

    defs = synset_definitions()
    return [f"{n}, {defs[w]}." for n, w in zip(classnames("imagenet1k"), imagenet_synsets()) if defs.get(w)]


def default_bank_parts(n_cupl: int = 2000) -> list:
    """The default bank's parts as CaptionDatasets, most important first (a limit keeps a prefix): the 1000
    ImageNet class names as "A <name>." / "A photo of a <name>.", Tux Paint, openclipart and GCompris train
    captions (the drawings' titles cleaned: :func:`clean_titles`), emoji names, the WordNet glosses of the ImageNet
    classes, and ``n_cupl`` CuPL sentences (their articles mended: :func:`fix_articles`). The class names, Tux Paint and emoji parts are the decoder corpus's
    own datasets, so they share its embedding cache. Missing optional parts (no emoji font, no openclipart) are left out."""
    from captioner.datasets import get_dataset

    parts = [text_dataset("classnames", "imagenet1k", classname_captions("imagenet1k"))]
    for ds, split in (("tuxpaint", "train"), ("openclipart", "train"), ("gcompris", "train"), ("emoji", "all")):
        try:
            d = get_dataset(ds, split=split)
        except CaptionerError:
            continue
        # drawings' titles as bank lines: serial numbers, file-name tags and licence text out (clean_title)
        parts.append(text_dataset("openclipart-titles", split, clean_titles(d.captions())) if ds == "openclipart" else d)
    parts.append(text_dataset("wordnet-glosses", "imagenet1k", wordnet_gloss_captions()))
    if n_cupl > 0:
        # articles mended ("An espresso ..."): a dataset of its own, the decoder corpus keeps CuPL's text
        parts.append(text_dataset("cupl-articles", f"sample{n_cupl}", [fix_articles(t) for t in cupl_sentences(n_cupl)]))
    return parts


def read_bank_file(path, limit: int | None = None, dim: int = 384) -> list[str]:
    """A user bank: one caption per line (UTF-8; blank lines skipped). One-line errors for a missing, empty,
    binary or too-large file; ``limit`` keeps the first ``limit`` captions."""
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        raise CaptionerError(f"bank file {p}: not found (give a text file with one caption per line, or a "
                             "dataset name)")
    with open(p, "rb") as f:
        head = f.read(8192)
    if b"\x00" in head:
        raise CaptionerError(f"bank file {p}: binary data, not text; give a UTF-8 text file with one caption "
                             "per line")
    out = []
    with open(p, encoding="utf-8", errors="strict") as f:
        try:
            for line in f:
                line = " ".join(line.split())
                if line:
                    out.append(line)
                    if limit and len(out) >= limit:
                        break
                    if len(out) * dim * 4 * 2 > MAX_BANK_BYTES:
                        raise CaptionerError(f"bank file {p}: over {len(out):,} captions, more than the "
                                             f"{MAX_BANK_BYTES >> 30} GiB of embeddings allowed; pass "
                                             "--bank-limit N to keep the first N")
        except UnicodeDecodeError as e:
            raise CaptionerError(f"bank file {p}: not UTF-8 text ({e.reason} at byte {e.start} of a line); "
                                 "give a UTF-8 text file with one caption per line") from None
    if not out:
        raise CaptionerError(f"bank file {p}: no captions (the file is empty or blank)")
    return out


def bank_sets(spec: str = "default", limit: int | None = None):
    """The CaptionDatasets a bank ``spec`` is made of (each embedded through the cache on its own):
    "default" (``default_bank_parts`` up to ``limit`` captions, default ``DEFAULT_BANK_LIMIT``), a dataset name
    ("tuxpaint": its train split; "emoji": all), or a text file with one caption per line."""
    from pathlib import Path

    from captioner.datasets import DATASETS, get_dataset

    if spec == "default":
        left = DEFAULT_BANK_LIMIT if limit is None else int(limit)
        sets = []
        for ds in default_bank_parts():
            if left <= 0:
                break
            n = len(ds.captions())
            if n > left:  # a prefix of this part: its own cache entry
                ds = text_dataset(f"{ds.name}-{ds.split}", f"first{left}", ds.captions()[:left])
                n = left
            sets.append(ds)
            left -= n
        return sets
    if spec in DATASETS and not Path(spec).is_file():
        ds = get_dataset(spec, split=DATASETS[spec].bank_split)
        if limit:
            ds.samples = ds.samples[: int(limit)]
        return [ds]
    texts = read_bank_file(spec, limit=limit)
    return [text_dataset("bank-file", hashlib.sha256("\n".join(texts).encode()).hexdigest()[:10], texts)]
