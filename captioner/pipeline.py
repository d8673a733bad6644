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
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import numpy as np

from captioner.artifacts import key_lock, quarantine
from captioner.errors import BadImageError, CacheMismatchError, CaptionerError
from captioner.lru import LRU

_DEFAULTS: dict = {}
_DEFAULTS_LOCK = threading.Lock()


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def decoder_cache_key(text_fingerprint: dict, preset_name: str, overrides: dict | None, texts, E,
                      vocab_priority: int = 0) -> str:
    """The hash in a trained decoder's checkpoint name: what the trained weights depend on and nothing else.

    That is the text encoder (its fingerprint: name, dims, pooling, weights hash, settings), the decoder
    settings as resolved from the preset and overrides (so editing a preset trains anew), the corpus
    (``captioner.decoder.corpus_hash`` of the texts in order and their embeddings, as ``train_decoder``
    checks it) and how many leading texts seed the vocabulary. JSON with sorted keys, so no dict order,
    and no path, time or process state goes in; ``save_every`` (when checkpoints are written) is left out.
    """
    from dataclasses import asdict

    from captioner.decoder import corpus_hash, preset

    mcfg, tcfg = preset(preset_name, **dict(overrides or {}))
    train = {k: v for k, v in asdict(tcfg).items() if k != "save_every"}
    return _hash({"txt": dict(text_fingerprint), "preset": preset_name, "model": asdict(mcfg), "train": train,
                  "corpus": corpus_hash(list(texts), E), "n": len(texts), "vocab_priority": int(vocab_priority)})


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 2)


MAX_HEADS = 32  # zero-shot heads kept per pipeline (the least recently used label list goes first)


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
    decode_input : "projection" (DeCap: the softmax-weighted mean of bank embeddings) or "rotation" (the
        rotated query itself, put at a caption's radius).
    temperature : DeCap softmax temperature on centred cosines (0.03 was best of 0.003 / 0.01 / 0.03 on the
        Tux Paint val split; the spread between them was small).
    pairfree_max : at most this many images and captions go into the pair-free matcher.
    """

    def __init__(self, image_encoder: str = "efficientnet-lite0", text_encoder: str = "minilm-l6",
                 device: str = "cpu", progress: bool = True, *, train_set=None, exclude=None,
                 decoder_preset: str = "small", decoder_corpus: str = "default", rotation_files: dict | None = None,
                 beam: int = 1, decode_input: str = "projection", temperature: float = 0.03,
                 pairfree_max: int = 2000, n_cupl: int = 2000, decoder_overrides: dict | None = None,
                 bank: str | None = None, bank_limit: int | None = None):
        if decode_input not in ("projection", "rotation"):
            raise CaptionerError(f"decode_input must be 'projection' or 'rotation', not {decode_input!r}")
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder
        self.device = device
        self.progress = progress
        self.decoder_preset = decoder_preset
        self.decoder_overrides = dict(decoder_overrides or {})
        self.decoder_corpus_kind = decoder_corpus
        self.rotation_files = dict(rotation_files or {})
        self.beam = beam
        self.decode_input = decode_input
        self.temperature = temperature
        self.pairfree_max = pairfree_max
        self.n_cupl = n_cupl
        self._train_set = train_set
        self._exclude = exclude
        self._lock = threading.RLock()
        self._enc: dict = {}
        self._bank = None
        self.bank_spec, self.bank_limit, self._cbank = bank, bank_limit, None
        self._pairs = None
        self._maps: dict = {}
        self._decoder = None
        self._heads = LRU(MAX_HEADS)  # one zero-shot head per label list: bounded for a server
        self._affine: dict = {}

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

    def _log(self, msg: str) -> None:
        if self.progress:
            import sys

            print(f"[captioner] {msg}", file=sys.stderr, flush=True)

    def encoder(self, which: str):
        """The image or text Encoder object (loaded once)."""
        from captioner.encoders import get_encoder

        with self._lock:
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

        with self._lock:
            if self._bank is None:
                self._log(f"caption bank: {self.train_set.name}/{self.train_set.split} captions, "
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

        with self._lock:
            if self._cbank is None:
                self._log(f"caption bank: {self.bank_spec} (limit {self.bank_limit or 'default'}), {self.text_encoder}")
                self._cbank = build_bank(self.encoder("text"), bank_sets(self.bank_spec, self.bank_limit),
                                         exclude=self.exclude, progress=self.progress, device=self.device)
            return self._cbank

    def train_pairs(self):
        """(X (N, D_img), Y (N, D_txt), sample_ids) of the train set, through the embedding cache; pairs whose
        caption is excluded are dropped too."""
        from captioner.bank import normalize_caption
        from captioner.cache import embed, paired

        with self._lock:
            if self._pairs is None:
                self._log(f"train set: embedding {self.train_set.name}/{self.train_set.split} images with "
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

    def _artifact_key(self, kind: str, extra=None) -> str:
        return _hash({"kind": kind, "img": self.encoder("image").fingerprint(),
                      "txt": self.encoder("text").fingerprint(), "train": [self.train_set.name,
                      self.train_set.split, self.train_set.key()], "bank": self.bank().key(), "extra": extra})

    def rotation(self, kind: str = "paired"):
        """The map ``kind`` (a ``captioner.rotations`` kind), loaded from its cache file or fitted and saved."""
        from alignment.errors import AlignmentError, MismatchError
        from alignment.procrustes import load_map
        from captioner.rotations import get_kind

        kind = get_kind(kind).name
        with self._lock:
            if kind in self._maps:
                return self._maps[kind]
            fx, fy = self.encoder("image").fingerprint(), self.encoder("text").fingerprint()
            if kind in self.rotation_files:
                try:
                    m = load_map(self.rotation_files[kind], x_encoder=fx, y_encoder=fy)
                except MismatchError as e:
                    raise CacheMismatchError(str(e)) from None
                except AlignmentError as e:
                    raise CaptionerError(str(e)) from None
                self._maps[kind] = m
                return m
            from captioner.paths import slug, subdir
            from captioner.rotations import key_params

            opts = self._fit_options(kind)
            path = subdir("rotations") / (f"{kind}-{slug(self.image_encoder, 40)}-{slug(self.text_encoder, 40)}-"
                                          f"{self._artifact_key(kind, key_params(kind, **opts))}.safetensors")
            with key_lock(path, what=f"the {kind} rotation {path.name}"):  # one process fits, the others load
                m = _load_or_heal(path, fx, fy)
                if m is None:
                    t0 = time.time()
                    self._log(f"fitting the {kind} map ({self.image_encoder} -> {self.text_encoder})")
                    try:
                        m = get_kind(kind).fit(_PipelineSource(self, fx, fy), **opts).map
                    except AlignmentError as e:
                        raise CaptionerError(f"fitting the {kind} map failed: {e}") from None
                    m.meta["fit_seconds"] = round(time.time() - t0, 3)
                    m.save(path)
            self._maps[kind] = m
            return m

    def use_rotation(self, kind: str, m) -> None:
        """Use the map ``m`` as rotation ``kind`` in this pipeline (memory only; e.g. one random seed of many
        in ``eval/experiments/pairfree_margin.py``). ``m`` must map this image encoder's space into this text encoder's."""
        from captioner.rotations import get_kind

        kind = get_kind(kind).name
        if m.dim_x != self.encoder("image").dim or m.dim_y != self.encoder("text").dim:
            raise CaptionerError(f"the map is {m.dim_x} -> {m.dim_y}, the encoders are "
                                 f"{self.encoder('image').dim} -> {self.encoder('text').dim}")
        with self._lock:
            self._maps[kind] = m

    def _fit_options(self, kind: str) -> dict:
        """The pipeline's own options for a kind (on top of the kind's defaults)."""
        return {"max": self.pairfree_max} if kind == "pairfree" else {}

    def _train_images(self) -> np.ndarray:
        self.train_pairs()
        return self._pairs[3].X

    # -- decoder ---------------------------------------------------------------------------------------
    def decoder(self):
        """The caption decoder for this text encoder (trained on text only on first use)."""
        from captioner.bank import bank_from_arrays, decoder_corpus
        from captioner.decoder import preset, train_decoder
        from captioner.paths import slug, subdir

        with self._lock:
            if self._decoder is not None:
                return self._decoder
            enc = self.encoder("text")
            if self.decoder_corpus_kind == "bank":
                texts, E = self.bank().texts, self.bank().E
            else:
                texts, E, _ = decoder_corpus(enc, exclude=self.exclude, progress=self.progress,
                                             device=self.device, n_cupl=self.n_cupl)
                if self.train_set.name != "tuxpaint":  # another domain: its own captions come first
                    b = self.bank()
                    merged = bank_from_arrays(list(b.texts) + list(texts), np.concatenate([b.E, E]),
                                              enc.fingerprint(), exclude=self.exclude)
                    texts, E = merged.texts, merged.E
            mcfg, tcfg = preset(self.decoder_preset, **self.decoder_overrides)
            key = decoder_cache_key(enc.fingerprint(), self.decoder_preset, self.decoder_overrides, texts, E,
                                    vocab_priority=len(self.bank()))
            path = subdir("checkpoints") / f"decoder-{slug(self.text_encoder, 40)}-{self.decoder_preset}-{key}.pt"
            serve_onnx = self.beam <= 1 and self.device == "cpu" and path.exists()
            if serve_onnx:  # greedy on CPU: the onnx export of the checkpoint, if made, spares importing torch
                from captioner.decoder_onnx import load_onnx_decoder

                self._decoder = load_onnx_decoder(path, enc.fingerprint())
                if self._decoder is not None:
                    return self._decoder
            with key_lock(path, what=f"the caption decoder {path.name}"):  # one process trains, others load
                if not path.exists() or not _complete(path):
                    self._log(f"training the caption decoder ({self.decoder_preset}, {len(texts)} texts, "
                              f"{tcfg.steps} steps) -> {path}")
                self._decoder = train_decoder(texts, E, enc.fingerprint(), path, mcfg, tcfg, device=self.device,
                                              progress=self.progress, vocab_priority=len(self.bank()))
                if self.beam <= 1 and self.device == "cpu" and _complete(path):
                    self._export_decoder(path)
            return self._decoder

    def _export_decoder(self, path: Path) -> None:
        """Export the trained decoder for onnxruntime (next runs load that); a failure only costs speed."""
        try:
            from captioner.decoder_onnx import export_decoder

            export_decoder(self._decoder, path)
        except Exception as e:  # noqa: BLE001 - e.g. no onnxruntime: the torch decoder serves
            import logging

            logging.getLogger(__name__).warning("decoder: no onnx export (%s); decoding in torch", e)

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

    def serving_rotation(self, kind: str = "paired"):
        """The map ``kind`` for one-image requests: a linear map folded into one float32 affine
        ``(X - mean_x) @ W + mean_y`` (what ``transform`` computes, to float noise, in ~0.1 ms instead of
        ~10 ms: no per-call copies of the projections, one matrix product instead of three). Other maps,
        and inputs the folded form would not check (wrong width, NaN), go through the map itself."""
        m = self.rotation(kind)
        with self._lock:
            hit = self._affine.get(kind)
            if hit is None or hit[0] is not m:
                hit = (m, _AffineMap.of(m))
                self._affine[kind] = hit
            return hit[1]

    def decoder_inputs(self, Q: np.ndarray) -> np.ndarray:
        """Text-space queries -> what the decoder reads (DeCap projection, or the query at caption radius)."""
        from captioner.retrieval import onto_manifold, project

        if self.decode_input == "projection":
            return project(Q, self.bank(), temperature=self.temperature)
        return onto_manifold(Q, self.bank())

    def caption_queries(self, Q: np.ndarray, top_k: int = 5, decode: bool = True) -> list[dict]:
        """Text-space queries (N, D_txt) -> caption dicts (without the encode timing)."""
        from captioner.retrieval import retrieve

        bank = self.caption_bank()
        t0 = time.perf_counter()
        idx, sc = retrieve(Q, bank, top_k)
        t_ret = _ms(t0) / max(1, len(Q))
        caps = None
        t_dec = 0.0
        if decode:
            dec = self.decoder()
            t0 = time.perf_counter()
            caps = dec.generate(self.decoder_inputs(Q), beam=self.beam)
            t_dec = _ms(t0) / max(1, len(Q))
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

        with self._lock:
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

        with self._lock:
            self.rotation(rotation)  # fail on a bad name before encoding anything
            t0 = time.perf_counter()
            X = self.encode_images(images)
            t_enc = _ms(t0) / len(X)
            t0 = time.perf_counter()
            Q = to_text_space(self.serving_rotation(rotation), X, self.bank().dim)
            t_rot = _ms(t0) / len(X)
            out = self.caption_queries(Q, top_k=top_k, decode=decode)
            for o in out:
                o["timings_ms"] = {"encode": round(t_enc, 2),
                                   "rotate_retrieve": round(t_rot + o["timings_ms"]["rotate_retrieve"], 2),
                                   "decode": o["timings_ms"]["decode"]}
            return out

    def head(self, labels: list[str], templates: list[str] | None = None, definitions=None,
             mode: str = "templates"):
        """Zero-shot head (C, D_txt) for a label list (cached per labels and prompts)."""
        from captioner.assets import templates as load_templates
        from captioner.zeroshot import LARGE_LABEL_SET, SHORT_TEMPLATES, build_head

        if templates is not None:
            tpl = list(templates)
        else:  # all 80 ImageNet templates, or CLIP's best 7 for a large label set (first-use cost)
            tpl = load_templates("imagenet1k") if len(labels) <= LARGE_LABEL_SET else list(SHORT_TEMPLATES)
        key = (tuple(labels), tuple(tpl), tuple(definitions or ()), mode)
        with self._lock:
            if key not in self._heads:
                self._heads[key] = build_head(self.encoder("text"), list(labels), tpl, definitions, mode,
                                              progress=self.progress)
            return self._heads[key]

    def classifier(self, labels: list[str], rotation: str = "paired", prompt_names: list[str] | None = None,
                   **head_kw):
        from captioner.zeroshot import ZeroShotClassifier, check_labels

        labels = check_labels(labels)
        from captioner.calibration import calibrated_scale

        W = self.head(prompt_names or labels, **head_kw)
        mu = self.bank().centered()[0]
        return ZeroShotClassifier(labels, W, self.serving_rotation(rotation), mu=mu,
                                  logit_scale=calibrated_scale(self, rotation))

    def classify(self, images, labels: list[str], top_k: int = 5, rotation: str = "paired",
                 templates: list[str] | None = None) -> list[dict]:
        """Zero-shot classify images among ``labels``.

        ``templates``: the prompts, each with ``{}`` (or ``{c}``) where the label goes, mean-pooled per class
        (default: the 80 ImageNet templates; CLIP's 7 best of them above 100 labels). The head is cached per
        labels and templates.

        Returns one dict per image: {"labels": [{"label", "prob"}, ... top_k], "timings_ms": {"encode",
        "rotate_retrieve"}}.
        """
        from captioner.zeroshot import check_labels, topk

        labels = check_labels(labels)
        if top_k < 1:
            raise CaptionerError(f"top_k must be >= 1, not {top_k}")
        if templates is not None:
            templates = [templates] if isinstance(templates, str) else list(templates)
            bad = [t for t in templates if not isinstance(t, str) or ("{}" not in t and "{c}" not in t)]
            if not templates or bad:
                raise CaptionerError(f"templates must be a non-empty list of strings with '{{}}' where the label "
                                     f"goes; got {bad[:3] if bad else templates!r}")
        with self._lock:
            clf = self.classifier(labels, rotation, templates=templates)
            t0 = time.perf_counter()
            X = self.encode_images(images)
            t_enc = _ms(t0) / len(X)
            t0 = time.perf_counter()
            P = clf.predict_proba(X)
            t_cls = _ms(t0) / len(X)
            top = topk(P, top_k)
            return [{"labels": [{"label": labels[j], "prob": float(P[i, j])} for j in top[i]],
                     "timings_ms": {"encode": round(t_enc, 2), "rotate_retrieve": round(t_cls, 2)}}
                    for i in range(len(X))]

    def alignment_report(self, n_perm: int = 20) -> dict:
        """How aligned the two encoders are on the train pairs, against a permutation null.

        Returns {"image_encoder", "text_encoder", "n_pairs", "metrics": {"mutual_knn": {"score", "null_mean",
        "null_std", ...}, "cka": {...}}, "scaling_plot": path or None}.
        """
        from alignment.metrics import permutation_null

        with self._lock:
            X, Y, _ = self.train_pairs()
            metrics = {}
            for name in ("mutual_knn", "cka"):
                r = permutation_null(name, X, Y, n_perm=n_perm, seed=0)
                metrics[name] = {k: float(v) for k, v in r.items() if isinstance(v, (int, float, np.floating))}
            return {"image_encoder": self.image_encoder, "text_encoder": self.text_encoder, "n_pairs": int(len(X)),
                    "metrics": metrics, "scaling_plot": _latest_scaling_plot()}


class _AffineMap:
    """A fitted linear map as one float32 affine map (see ``Pipeline.serving_rotation``)."""

    def __init__(self, m, W, mean_x, mean_y):
        self.map, self.W, self.mean_x, self.mean_y = m, W, mean_x, mean_y
        self.meta = getattr(m, "meta", {})

    @classmethod
    def of(cls, m):
        from alignment.procrustes import LinearMap

        if not isinstance(m, LinearMap) or type(m).transform is not LinearMap.transform:
            return m  # a map with its own transform: used as it is
        W = np.asarray(m.matrix(), np.float64)
        return cls(m, np.ascontiguousarray(W, np.float32), np.asarray(m.mean_x, np.float32),
                   np.asarray(m.mean_y, np.float32))

    def transform(self, X):
        A = X if isinstance(X, np.ndarray) else None
        if A is None or A.ndim != 2 or A.shape[1] != self.W.shape[0] or not np.isfinite(A).all():
            return self.map.transform(X)  # the map's own checks and messages (and torch tensors)
        A = A.astype(np.float32, copy=False)
        return (A - self.mean_x) @ self.W + self.mean_y

    __call__ = transform

    def __getattr__(self, name):  # dim_x, dim_y, method ... of the map itself
        if name == "map":
            raise AttributeError(name)
        return getattr(self.map, name)


def _load_or_heal(path: Path, fx: dict, fy: dict):
    """The cached map at ``path``; None when there is none, or when it was damaged (then it is moved aside,
    named in one line, to be fitted again)."""
    from alignment.errors import AlignmentError, MismatchError
    from alignment.procrustes import load_map

    side = path.with_suffix(".json")
    if not (path.exists() and side.exists()):
        return None
    try:
        return load_map(path, x_encoder=fx, y_encoder=fy)
    except MismatchError as e:
        raise CacheMismatchError(str(e)) from None
    except AlignmentError as e:
        quarantine(path, str(e).split(": ", 1)[-1].split(";")[0], side)
        return None


def _complete(path: Path) -> bool:
    try:
        import torch

        return bool(torch.load(path, map_location="cpu", weights_only=False).get("complete"))
    except Exception:  # unreadable: train_decoder will say so
        return False


def _latest_scaling_plot() -> str | None:
    """The newest scaling-law plot written by `captioner scaling` under the home folder, if any."""
    from captioner.paths import home

    try:
        plots = sorted(home().glob("**/scaling*.png"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    return str(plots[-1]) if plots else None


class _PipelineSource:
    """A pipeline's data as a ``captioner.rotations.FitSource``: its train pairs, train images and bank."""

    def __init__(self, pipe: Pipeline, fx: dict, fy: dict):
        self.pipe = pipe
        self.meta = {"x_encoder": fx, "y_encoder": fy, "train": f"{pipe.train_set.name}/{pipe.train_set.split}",
                     "bank_key": pipe.bank().key()}

    def pairs(self):
        return self.pipe.train_pairs()[:2]

    def images(self):
        return self.pipe._train_images()

    def texts(self):
        return self.pipe.bank().E

    def image_encoder(self):
        return self.pipe.encoder("image")

    def text_encoder(self):
        return self.pipe.encoder("text")

    def log(self, msg: str) -> None:
        self.pipe._log(msg)


__all__ = ["Pipeline", "BadImageError"]
