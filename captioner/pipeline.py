"""The captioner end to end: image files in; captions, labels and an alignment report out.

``Pipeline`` holds an image encoder, a text encoder, a caption bank (Tux Paint train captions by default),
the rotations from image space into text space, and the text-only decoder. Everything is built on first
use and cached under ``captioner.paths.home()``:

- the bank and all embeddings go through the embedding cache (``captioner.cache``);
- ``paired``: orthogonal Procrustes on the train image-caption pairs;
- ``pairfree``: ``alignment.pairfree.match`` between the train images and the bank captions, no pairs;
- ``head``: no image-caption pair either: pseudo-pairs from the image encoder's own classifier head (its
  ImageNet class probabilities times the text embeddings of the class names, ``alignment.pseudo``), then
  Procrustes; only for image encoders that have a head (EfficientNet-Lite0);
- ``ridge`` (the least-squares map from pairs: the one-linear-map reference) and ``random`` (a Haar-random
  rotation between the two PCA bases: the floor), for the evaluation;
- the decoder, trained on text only (bank captions, emoji names, CuPL sentences) if absent.

Each artifact's file name carries a hash of the encoder fingerprints and data it was made from, and loading
checks the fingerprints again, so a rotation or decoder made for other encoders is never used silently.
The public contract (``caption``, ``classify``, ``alignment_report``, ``rotations``, ``warmup``, ``default``)
is what the CLI and the Gradio demo call; keep it stable.

``Pipeline`` itself holds the encoders, the train set, the bank and the train pairs; three small parts do
the rest, each reading the pipeline through its public methods only: ``pipe.maps``
(:class:`captioner.pipeline_rotations.PipelineRotations`: the maps by kind), ``pipe.decoding``
(:class:`captioner.pipeline_decoder.PipelineDecoder`: the decoder and what it reads) and ``pipe.zeroshot``
(:class:`captioner.pipeline_zeroshot.PipelineZeroShot`: heads, classifiers, the alignment report). The
pipeline's methods of the same names call them.
"""
from __future__ import annotations

import json
import threading
import time

import numpy as np

from captioner.errors import BadImageError, CaptionerError
from captioner.paths import short_hash
from captioner.pipeline_decoder import PipelineDecoder
from captioner.pipeline_rotations import PipelineRotations
from captioner.pipeline_zeroshot import MAX_HEADS, PipelineZeroShot, ms_since

_DEFAULTS: dict = {}
_DEFAULTS_LOCK = threading.Lock()


class Pipeline:
    """Caption and classify images with one rotation between separately trained encoders.

    Parameters
    ----------
    image_encoder, text_encoder : registry names (``captioner.encoders``).
    device : "cpu", "cuda", "cuda:N" or "mps".
    progress : show tqdm bars while building (embedding, fitting, decoder training).
    train_set : CaptionDataset whose image-caption pairs fit the paired maps and whose captions make the
        bank (default: Tux Paint train).
    exclude : captions the bank and the decoder corpus must not contain (default: Tux Paint test).
    decoder_preset : ``captioner.decoder.PRESETS`` name for the decoder trained on first use;
        ``decoder_overrides`` changes single settings of it (e.g. ``{"steps": 300}``).
    decoder_corpus : "default" (bank + Tux Paint val + emoji names + ImageNet class-name captions + CuPL)
        or "bank" (the bank only).
    rotation_files : {"paired": path, ...} saved maps to use instead of fitting (checked against the
        encoders; a map fitted for others is refused).
    beam : beam width for decoding (1 = greedy; beam 3 gained nothing on the Tux Paint val split).
    decode_input : "projection" (DeCap: the softmax-weighted mean of bank embeddings), "rotation" (the
        rotated query itself, put at a caption's radius) or "auto" (per rotation, chosen on the Tux Paint val
        split: ``captioner.pipeline_decoder.AUTO_DECODE_INPUT``; the head map reads the query, others project).
    temperature : DeCap softmax temperature on centred cosines (0.03 was best of 0.003 / 0.01 / 0.03 on the
        Tux Paint val split; the spread between them was small).
    pairfree_max : at most this many images and captions go into the pair-free matcher.
    """

    def __init__(self, image_encoder: str = "efficientnet-lite0", text_encoder: str = "minilm-l6",
                 device: str = "cpu", progress: bool = True, *, train_set=None, exclude=None,
                 decoder_preset: str = "small", decoder_corpus: str = "default", rotation_files: dict | None = None,
                 beam: int = 1, decode_input: str = "auto", temperature: float = 0.03,
                 pairfree_max: int = 2000, n_cupl: int = 2000, decoder_overrides: dict | None = None,
                 bank: str | None = None, bank_limit: int | None = None):
        if decode_input not in ("auto", "projection", "rotation"):
            raise CaptionerError(f"decode_input must be 'auto', 'projection' or 'rotation', not {decode_input!r}")
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.device = device
        self.progress = progress
        self.decoder_preset = decoder_preset
        self.decoder_overrides = dict(decoder_overrides or {})
        self.decoder_corpus_kind = decoder_corpus
        self.beam = beam
        self.decode_input = decode_input
        self.temperature = temperature
        self.n_cupl = n_cupl
        self._train_set = train_set
        self._exclude = exclude
        self.lock = threading.RLock()  # the parts and the public calls serialise on it
        self._enc: dict = {}
        self._bank = None
        self.bank_spec, self.bank_limit, self._cbank = bank, bank_limit, None
        self._pairs = None
        self.maps = PipelineRotations(self, rotation_files, pairfree_max)
        self.decoding = PipelineDecoder(self)
        self.zeroshot = PipelineZeroShot(self, MAX_HEADS)

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def default(cls, **kw) -> "Pipeline":
        """One process-wide instance per set of arguments (the demo and repeated CLI calls share it)."""
        key = json.dumps(kw, sort_keys=True, default=str)
        with _DEFAULTS_LOCK:
            if key not in _DEFAULTS:
                _DEFAULTS[key] = cls(**kw)
            return _DEFAULTS[key]

    @property
    def rotations(self) -> list[str]:
        """Rotations a user picks from (the demo's radio buttons). ``eval_rotations`` adds the references."""
        from captioner.rotations import PUBLIC

        return self._available(PUBLIC)

    def _available(self, kinds) -> list[str]:
        """``kinds`` less those that need a classifier head when the image encoder has none."""
        from captioner.encoders.heads import has_classifier_head
        from captioner.rotations import KINDS

        head = None
        out = []
        for r in kinds:
            if KINDS[r].needs_head:
                head = has_classifier_head(self.encoder("image")) if head is None else head
                if not head:
                    continue
            out.append(r)
        return out

    @property
    def eval_rotations(self) -> list[str]:
        from captioner.rotations import ALL

        return self._available(ALL)

    @property
    def rotation_files(self) -> dict:
        return self.maps.files

    @property
    def pairfree_max(self) -> int:
        return self.maps.pairfree_max

    def log(self, msg: str) -> None:
        """One progress line on stderr (unless ``progress`` is off)."""
        if self.progress:
            import sys

            print(f"[captioner] {msg}", file=sys.stderr, flush=True)

    def encoder(self, which: str):
        """The image or text Encoder object (loaded once)."""
        from captioner.encoders import get_encoder

        with self.lock:
            if which not in self._enc:
                name = self.image_encoder if which == "image" else self.text_encoder
                enc = get_encoder(name, device=self.device)
                if enc.modality != which:
                    raise CaptionerError(f"encoder {name!r} encodes {enc.modality}s; the {which} encoder must "
                                         f"encode {which}s")
                self._enc[which] = enc
            return self._enc[which]

    @property
    def train_set(self):
        if self._train_set is None:
            from captioner.datasets import get_dataset

            self._train_set = get_dataset("tuxpaint", split="train")
        return self._train_set

    @property
    def exclude(self) -> list[str]:
        if self._exclude is None:
            from captioner.datasets import get_dataset

            try:
                self._exclude = get_dataset("tuxpaint", split="test").captions()
            except CaptionerError:
                self._exclude = []
        return list(self._exclude)

    def bank(self):
        """The caption bank (train captions minus ``exclude``), built on first use."""
        from captioner.bank import build_bank

        with self.lock:
            if self._bank is None:
                self.log(f"caption bank: {self.train_set.name}/{self.train_set.split} captions, "
                          f"{self.text_encoder}")
                self._bank = build_bank(self.encoder("text"), [self.train_set], exclude=self.exclude,
                                        progress=self.progress, device=self.device)
            return self._bank

    def caption_bank(self):
        """The bank captions are retrieved from: ``bank()`` (the train captions the maps are fitted with) unless
        the pipeline was given ``bank=`` ("default": the broad bank of ``captioner.bank.bank_sets``, a dataset
        name, or a file), built once through the embedding cache, minus ``exclude``."""
        if self.bank_spec in (None, "train"):
            return self.bank()
        from captioner.bank import bank_sets, build_bank

        with self.lock:
            if self._cbank is None:
                self.log(f"caption bank: {self.bank_spec} (limit {self.bank_limit or 'default'}), {self.text_encoder}")
                if self.bank_spec == "default":  # one cached file (captioner/bankcache.py)
                    from captioner.bankcache import default_bank

                    self._cbank = default_bank(self.encoder("text"), self.bank_limit, exclude=self.exclude,
                                               progress=self.progress, device=self.device)
                else:
                    self._cbank = build_bank(self.encoder("text"), bank_sets(self.bank_spec, self.bank_limit),
                                             exclude=self.exclude, progress=self.progress, device=self.device)
            return self._cbank

    def train_pairs(self):
        """(X (N, D_img), Y (N, D_txt), sample_ids) of the train set, through the embedding cache; pairs whose
        caption is excluded are dropped too."""
        from captioner.bank import normalize_caption
        from captioner.cache import embed, paired

        with self.lock:
            if self._pairs is None:
                self.log(f"train set: embedding {self.train_set.name}/{self.train_set.split} images with "
                          f"{self.image_encoder}")
                xs = embed(self.encoder("image"), self.train_set, "image", progress=self.progress)
                ts = embed(self.encoder("text"), self.train_set, "text", progress=self.progress)
                X, Y, sids = paired(xs, ts)
                banned = {normalize_caption(c) for c in self.exclude}
                if banned:
                    cap = {s.id: s.captions[0] if s.captions else "" for s in self.train_set.samples}
                    keep = [i for i, s in enumerate(sids) if normalize_caption(cap.get(s, "")) not in banned]
                    X, Y, sids = X[keep], Y[keep], [sids[i] for i in keep]
                if len(sids) < 3:
                    raise CaptionerError(f"only {len(sids)} image-caption pairs in "
                                         f"{self.train_set.name}/{self.train_set.split}; need at least 3")
                self._pairs = (X, Y, sids, xs)
            return self._pairs[:3]

    def artifact_key(self, kind: str, extra=None) -> str:
        """The hash in an artifact's file name: the encoders' fingerprints, the train set, the bank and ``extra``."""
        return short_hash({"kind": kind, "img": self.encoder("image").fingerprint(),
                      "txt": self.encoder("text").fingerprint(), "train": [self.train_set.name,
                      self.train_set.split, self.train_set.key()], "bank": self.bank().key(), "extra": extra})

    def train_images(self) -> np.ndarray:
        """The train set's image embeddings (N, D_img), all of them (``train_pairs`` drops excluded captions)."""
        self.train_pairs()
        return self._pairs[3].X

    _train_images = train_images  # the older name (eval/experiments call it)

    # -- the parts -----------------------------------------------------------------------------------------
    def rotation(self, kind: str = "paired"):
        """The map ``kind`` (a ``captioner.rotations`` kind), loaded from its cache file or fitted and saved."""
        return self.maps.get(kind)

    def use_rotation(self, kind: str, m) -> None:
        """Use the map ``m`` as rotation ``kind`` in this pipeline (memory only; e.g. one random seed of many
        in ``eval/experiments/pairfree_margin.py``). ``m`` must map this image encoder's space into this text encoder's."""
        self.maps.use(kind, m)

    def serving_rotation(self, kind: str = "paired"):
        """The map ``kind`` folded for one-image requests (``PipelineRotations.serving``)."""
        return self.maps.serving(kind)

    def decoder(self):
        """The caption decoder for this text encoder (trained on text only on first use)."""
        return self.decoding.get()

    def decode_input_for(self, rotation: str | None = None) -> str:
        """What the decoder reads for queries of ``rotation`` ("projection" or "rotation")."""
        return self.decoding.input_for(rotation)

    def decoder_inputs(self, Q: np.ndarray, rotation: str | None = None) -> np.ndarray:
        """Text-space queries (N, D_txt) -> what the decoder reads (N, D_txt)."""
        return self.decoding.inputs(Q, rotation)

    def head(self, labels: list[str], templates: list[str] | None = None, definitions=None,
             mode: str = "templates"):
        """Zero-shot head (C, D_txt) for a label list (cached per labels and prompts)."""
        return self.zeroshot.head(labels, templates, definitions, mode)

    def classifier(self, labels: list[str], rotation: str = "paired", prompt_names: list[str] | None = None,
                   **head_kw):
        """A ``captioner.zeroshot.ZeroShotClassifier`` over ``labels`` through ``rotation``."""
        return self.zeroshot.classifier(labels, rotation, prompt_names, **head_kw)

    def classify(self, images, labels: list[str], top_k: int = 5, rotation: str = "paired",
                 templates: list[str] | None = None) -> list[dict]:
        """Zero-shot classify images among ``labels`` (see ``PipelineZeroShot.classify``).

        Returns one dict per image: {"labels": [{"label", "prob"}, ... top_k], "timings_ms": {"encode",
        "rotate_retrieve"}}.
        """
        return self.zeroshot.classify(images, labels, top_k, rotation, templates)

    def alignment_report(self, n_perm: int = 20) -> dict:
        """How aligned the two encoders are on the train pairs, against a permutation null (see
        ``PipelineZeroShot.alignment_report``)."""
        return self.zeroshot.alignment_report(n_perm)

    # -- building blocks on embeddings -----------------------------------------------------------------
    def encode_images(self, images) -> np.ndarray:
        """PIL images (or paths) -> (N, D_img) float32."""
        from PIL import Image

        from captioner.images import load_image

        if images is None or len(images) == 0:
            raise CaptionerError("no images given")
        ims = [(im if im.mode == "RGB" else im.convert("RGB")) if isinstance(im, Image.Image) else load_image(im)
               for im in images]
        return self.encoder("image").encode(ims)

    def text_queries(self, X: np.ndarray, rotation: str) -> np.ndarray:
        from captioner.retrieval import to_text_space

        return to_text_space(self.rotation(rotation), X, self.bank().dim)

    def caption_queries(self, Q: np.ndarray, top_k: int = 5, decode: bool = True,
                        rotation: str | None = None) -> list[dict]:
        """Text-space queries (N, D_txt) -> caption dicts (without the encode timing); ``rotation`` (the map the
        queries came through) picks the decoder's input under ``decode_input="auto"``."""
        from captioner.pipeline_decoder import drop_prompt_template
        from captioner.retrieval import retrieve

        bank = self.caption_bank()
        t0 = time.perf_counter()
        idx, sc = retrieve(Q, bank, top_k)
        t_ret = ms_since(t0) / max(1, len(Q))
        caps = None
        t_dec = 0.0
        if decode:
            dec = self.decoder()
            t0 = time.perf_counter()
            caps = [drop_prompt_template(c) for c in dec.generate(self.decoder_inputs(Q, rotation), beam=self.beam)]
            t_dec = ms_since(t0) / max(1, len(Q))
        out = []
        for i in range(len(Q)):
            retrieved = [{"caption": bank.texts[j], "score": float(s)} for j, s in zip(idx[i], sc[i])]
            cap = caps[i] if caps is not None and caps[i] else retrieved[0]["caption"]
            out.append({"caption": cap, "retrieved": retrieved,
                        "timings_ms": {"rotate_retrieve": round(t_ret, 2), "decode": round(t_dec, 2)}})
        return out

    # -- the public contract ---------------------------------------------------------------------------
    def warmup(self) -> None:
        """Build everything the public calls need (bank, both rotations, decoder) and run one request."""
        from PIL import Image

        with self.lock:
            self.bank()
            for r in self.rotations:
                self.rotation(r)
            self.decoder()
            im = Image.new("RGB", (64, 64), (255, 255, 255))
            self.caption([im], top_k=1)
            self.classify([im], ["animal", "vehicle"], top_k=1)

    def caption(self, images, top_k: int = 5, rotation: str = "paired", decode: bool = True) -> list[dict]:
        """Caption images.

        Parameters
        ----------
        images : list of PIL images (paths are accepted too).
        top_k : retrieved captions per image.
        rotation : one of ``eval_rotations``.
        decode : run the decoder (else the caption is the top retrieved one).

        Returns
        -------
        one dict per image: {"caption", "retrieved": [{"caption", "score"}, ...], "timings_ms": {"encode",
        "rotate_retrieve", "decode"}} (per-image milliseconds).
        """
        if top_k < 1:
            raise CaptionerError(f"top_k must be >= 1, not {top_k}")
        from captioner.retrieval import to_text_space

        with self.lock:
            self.rotation(rotation)  # fail on a bad name before encoding anything
            t0 = time.perf_counter()
            X = self.encode_images(images)
            t_enc = ms_since(t0) / len(X)
            t0 = time.perf_counter()
            Q = to_text_space(self.serving_rotation(rotation), X, self.bank().dim)
            t_rot = ms_since(t0) / len(X)
            out = self.caption_queries(Q, top_k=top_k, decode=decode, rotation=rotation)
            for o in out:
                o["timings_ms"] = {"encode": round(t_enc, 2),
                                   "rotate_retrieve": round(t_rot + o["timings_ms"]["rotate_retrieve"], 2),
                                   "decode": o["timings_ms"]["decode"]}
            return out


__all__ = ["Pipeline", "BadImageError"]
