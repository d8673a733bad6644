"""The pipeline's text-only caption decoder: trained on first use (one process trains, others wait and load),
served through onnxruntime for greedy decoding on a CPU. ``PipelineDecoder`` is a part of
:class:`captioner.pipeline.Pipeline` (``pipe.decoding``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from captioner.artifacts import key_lock
from captioner.paths import short_hash


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
    # ema off (0) is left out too, so the keys of decoders trained before the setting existed stay the same
    train = {k: v for k, v in asdict(tcfg).items() if k != "save_every" and not (k == "ema" and not v)}
    return short_hash({"txt": dict(text_fingerprint), "preset": preset_name, "model": asdict(mcfg), "train": train,
                  "corpus": corpus_hash(list(texts), E), "n": len(texts), "vocab_priority": int(vocab_priority)})


def _complete(path: Path) -> bool:
    try:
        import torch

        return bool(torch.load(path, map_location="cpu", weights_only=False).get("complete"))
    except Exception:  # unreadable: train_decoder will say so
        return False


# decode_input="auto": the rotations whose decoder reads the rotated query itself; every other rotation reads
# DeCap's projection. Chosen on the Tux Paint val split (49 images, CIDEr x100; `python -m
# eval.experiments.decode_input`): head 60.3 reading the query vs 23.5 through the projection; paired 8.0 vs
# 24.5, pairfree 4.0 vs 4.8, ridge 4.4 vs 15.1 (docs/results/pairfree-real.md).
AUTO_DECODE_INPUT = {"head": "rotation"}


def drop_prompt_template(caption: str) -> str:
    """A decoded caption without the class-name prompt's template: "a photo of a lorikeet." -> "a lorikeet.".
    The decoder corpus holds "A photo of a <class>." for every ImageNet class (``captioner.bank.
    classname_captions``); a query near those prompts decodes to the template, which names no content and
    is wrong for a drawing. The article is set again for the noun it now stands before ("a photo of an
    coffeemaker." -> "a coffeemaker.": the decoder's own slip, plain once the template is gone)."""
    import re

    from captioner.subject import article

    def keep(m):
        det = m.group(2).lower()
        return f"{article(m.group(3)) if det in ('a', 'an') else m.group(2)} {m.group(3)}"

    return re.sub(r"^(a|an) photo of (a|an|the) (\w[\w'-]*)", keep, caption, flags=re.IGNORECASE)


class PipelineDecoder:
    """The caption decoder of one pipeline and what it reads. Reads the pipeline through its public methods
    and settings only (``encoder``, ``bank``, ``train_set``, ``exclude``, ``log``, ``lock``, ``device``,
    ``progress``, ``decoder_preset``, ``decoder_overrides``, ``decoder_corpus_kind``, ``n_cupl``, ``beam``,
    ``decode_input``, ``temperature``)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.model = None  # the decoder in use, once built (``get``) or given (``use``)

    def use(self, decoder) -> None:
        """Decode with ``decoder`` (e.g. a checkpoint loaded by a benchmark) instead of building one."""
        with self.pipe.lock:
            self.model = decoder

    def get(self):
        """The caption decoder for this text encoder (trained on text only on first use)."""
        from captioner.bank import bank_from_arrays, decoder_corpus
        from captioner.decoder import preset
        from captioner.decoder_train import train_decoder
        from captioner.paths import slug, subdir

        pipe = self.pipe
        with pipe.lock:
            if self.model is not None:
                return self.model
            enc = pipe.encoder("text")
            if pipe.decoder_corpus_kind == "bank":
                texts, E = pipe.bank().texts, pipe.bank().E
            else:
                texts, E, _ = decoder_corpus(enc, exclude=pipe.exclude, progress=pipe.progress,
                                             device=pipe.device, n_cupl=pipe.n_cupl)
                if pipe.train_set.name != "tuxpaint":  # another domain: its own captions come first
                    b = pipe.bank()
                    merged = bank_from_arrays(list(b.texts) + list(texts), np.concatenate([b.E, E]),
                                              enc.fingerprint(), exclude=pipe.exclude)
                    texts, E = merged.texts, merged.E
            mcfg, tcfg = preset(pipe.decoder_preset, **pipe.decoder_overrides)
            key = decoder_cache_key(enc.fingerprint(), pipe.decoder_preset, pipe.decoder_overrides, texts, E,
                                    vocab_priority=len(pipe.bank()))
            path = subdir("checkpoints") / f"decoder-{slug(pipe.text_encoder, 40)}-{pipe.decoder_preset}-{key}.pt"
            serve_onnx = pipe.beam <= 1 and pipe.device == "cpu" and path.exists()
            if serve_onnx:  # greedy on CPU: the onnx export of the checkpoint, if made, spares importing torch
                from captioner.decoder_onnx import load_onnx_decoder

                self.model = load_onnx_decoder(path, enc.fingerprint())
                if self.model is not None:
                    return self.model
            with key_lock(path, what=f"the caption decoder {path.name}"):  # one process trains, others load
                if not path.exists() or not _complete(path):
                    pipe.log(f"training the caption decoder ({pipe.decoder_preset}, {len(texts)} texts, "
                             f"{tcfg.steps} steps) -> {path}")
                self.model = train_decoder(texts, E, enc.fingerprint(), path, mcfg, tcfg, device=pipe.device,
                                           progress=pipe.progress, vocab_priority=len(pipe.bank()))
                if pipe.beam <= 1 and pipe.device == "cpu" and _complete(path):
                    self.export(path)
            return self.model

    def export(self, path: Path) -> None:
        """Export the trained decoder for onnxruntime (next runs load that); a failure only costs speed."""
        try:
            from captioner.decoder_onnx import export_decoder

            export_decoder(self.model, path)
        except Exception as e:  # noqa: BLE001 - e.g. no onnxruntime: the torch decoder serves
            import logging

            logging.getLogger(__name__).warning("decoder: no onnx export (%s); decoding in torch", e)

    def input_for(self, rotation: str | None = None) -> str:
        """What the decoder reads for queries of ``rotation``: the pipeline's ``decode_input``, or under "auto"
        ``AUTO_DECODE_INPUT`` (the rotation's own entry, else "projection")."""
        if self.pipe.decode_input != "auto":
            return self.pipe.decode_input
        return AUTO_DECODE_INPUT.get(rotation, "projection")

    def inputs(self, Q: np.ndarray, rotation: str | None = None) -> np.ndarray:
        """Text-space queries (N, D_txt) -> what the decoder reads (N, D_txt): DeCap's projection onto the
        bank, or the query itself at a caption's radius."""
        from captioner.retrieval import onto_manifold, project

        if self.input_for(rotation) == "projection":
            return project(Q, self.pipe.bank(), temperature=self.pipe.temperature)
        return onto_manifold(Q, self.pipe.bank())
