"""Training the text-only caption decoder (``captioner.decoder``): resumable, seeded per step, checkpointed
atomically; a damaged checkpoint is moved aside and training starts again."""
from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from captioner.decoder import (
    CHECKPOINT_FORMAT,
    PAD,
    Decoder,
    DecoderConfig,
    TrainConfig,
    Vocab,
    build_model,
    corpus_hash,
    encoder_diff,
    load_decoder,
    normalize_t,
    read_checkpoint,
    save_checkpoint,
)
from captioner.errors import CacheMismatchError, CaptionerError, DamagedArtifactError


def train_decoder(texts: list[str], E: np.ndarray, text_encoder: dict, path: str | Path,
                  model_config: DecoderConfig | None = None, train_config: TrainConfig | None = None,
                  device: str = "cpu", progress: bool = True, force: bool = False, vocab_priority: int = 0,
                  stop_after: int | None = None) -> Decoder:
    """Train (or resume, or just load) a decoder that maps each text's embedding back to the text.

    Parameters
    ----------
    texts : the N training captions.
    E : (N, D) their embeddings by ``text_encoder`` (row i encodes texts[i]).
    text_encoder : the encoder's fingerprint; stored in the checkpoint, which then refuses other encoders.
    path : checkpoint file; written atomically every ``save_every`` steps and at the end.
    force : start from scratch even if a checkpoint exists.
    vocab_priority : the word pieces of the first this-many texts are always in the vocabulary.
    stop_after : leave after this step with a resumable checkpoint (time-boxed training; tests of resume).

    Returns
    -------
    Decoder, in eval mode.
    """
    from captioner.threads import configure

    configure()  # before torch: thread count and spinning for a shared CPU
    import torch
    from tqdm.auto import tqdm

    path = Path(path)
    E, mcfg, tcfg = _checked(texts, E, model_config, train_config)
    chash = corpus_hash(texts, E)

    state = None if force else _resumable(path, text_encoder, mcfg, tcfg, chash)
    if state is not None:
        if state.get("complete") and state["step"] >= tcfg.steps:
            return load_decoder(path, text_encoder, device)
        vocab = Vocab(state["vocab"])
    else:
        vocab = Vocab.build(texts, mcfg.vocab_max, vocab_priority)
    mcfg = DecoderConfig(**{**asdict(mcfg), "vocab_size": vocab.size})

    tokens = torch.from_numpy(vocab.encode(texts, mcfg.max_len))  # (N, L)
    emb = normalize_t(torch.from_numpy(E))  # (N, D)
    model, opt = _model_and_optimizer(mcfg, tcfg, state, device)
    step, losses, seconds = 0, [], 0.0
    if state is not None:
        step, losses, seconds = state["step"], list(state["losses"]), float(state.get("seconds", 0.0))
    ema = _ema_start(model, tcfg, state)

    def checkpoint(complete: bool):
        save_checkpoint(path, {
            "format": CHECKPOINT_FORMAT, "model_config": asdict(mcfg), "train_config": asdict(tcfg),
            "vocab": vocab.bert_ids, "text_encoder": dict(text_encoder),
            "corpus": {"n": len(texts), "hash": chash}, "model": model.state_dict(), "ema": ema,
            "optimizer": opt.state_dict(), "step": step, "losses": losses, "complete": complete,
            "seconds": seconds, "saved": time.strftime("%Y-%m-%dT%H:%M:%S"),
        })

    model.train()
    bar = tqdm(total=tcfg.steps, initial=step, desc=f"train decoder ({len(texts)} texts)", unit="step",
               disable=not progress, leave=False)
    t0 = time.time()
    last = tcfg.steps if stop_after is None else min(tcfg.steps, stop_after)
    while step < last:
        losses.append(round(_step(model, opt, emb, tokens, tcfg, step, device, ema), 5))
        step += 1
        bar.update(1)
        if step % 25 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-25:]):.3f}")
        if step % tcfg.save_every == 0 and step < tcfg.steps:
            seconds += time.time() - t0
            t0 = time.time()
            checkpoint(False)
    bar.close()
    seconds += time.time() - t0
    checkpoint(step >= tcfg.steps)
    if ema is not None:
        model.load_state_dict(ema)  # serve the averaged weights, as load_decoder does
    model.eval()
    return Decoder(model, mcfg, vocab, dict(text_encoder),
                   meta={"step": step, "losses": losses, "corpus": {"n": len(texts), "hash": chash},
                         "train_config": asdict(tcfg), "seconds": seconds}, device=device)


def _checked(texts, E, model_config, train_config) -> tuple[np.ndarray, DecoderConfig, TrainConfig]:
    """The corpus embeddings as float32 and the configs, the model's input width set to the embeddings'."""
    E = np.asarray(E, np.float32)
    if len(texts) == 0:
        raise CaptionerError("decoder training corpus is empty")
    if E.shape[0] != len(texts):
        raise CaptionerError(f"decoder corpus: {len(texts)} texts but {E.shape[0]} embeddings")
    mcfg = model_config or DecoderConfig()
    tcfg = train_config or TrainConfig()
    if mcfg.emb_dim != E.shape[1]:
        mcfg = DecoderConfig(**{**asdict(mcfg), "emb_dim": int(E.shape[1])})
    return E, mcfg, tcfg


def _resumable(path: Path, text_encoder: dict, mcfg: DecoderConfig, tcfg: TrainConfig, chash: str) -> dict | None:
    """The checkpoint at ``path`` to resume or reuse, or None to start from step 0 (none there, or damaged:
    moved aside and named). Refuses, with the fix, one made for another encoder, corpus or config."""
    if not path.exists():
        return None
    try:
        state = read_checkpoint(path)
    except DamagedArtifactError as e:  # moved aside, named, and trained again from step 0
        from captioner.artifacts import quarantine

        quarantine(path, str(e).split(": ", 1)[-1].split(";")[0])
        return None
    diff = encoder_diff(state["text_encoder"], text_encoder)
    if diff:
        raise CacheMismatchError(f"{path}: checkpoint trained for text encoder "
                                 f"{state['text_encoder'].get('name')!r}, not {text_encoder.get('name')!r} "
                                 f"(they differ in {', '.join(diff)}); use another path or force=True")
    want = {**asdict(mcfg), "vocab_size": state["model_config"]["vocab_size"]}
    saved = {**asdict(TrainConfig()), **state["train_config"]}  # settings added since: their defaults
    if state["corpus"]["hash"] != chash or state["model_config"] != want \
            or {k: v for k, v in saved.items() if k != "steps"} != \
            {k: v for k, v in asdict(tcfg).items() if k != "steps"}:
        raise CacheMismatchError(f"{path}: checkpoint made with another corpus or config; "
                                 "use another path or force=True to retrain")
    return state


def _model_and_optimizer(mcfg: DecoderConfig, tcfg: TrainConfig, state: dict | None, device):
    """The seeded model and its AdamW, restored from ``state`` when resuming."""
    import torch

    torch.manual_seed(tcfg.seed)  # the initial weights: part of what makes a run reproducible
    model = build_model(mcfg).to(device)
    try:  # the fused kernel: one pass over the parameters instead of ~10 per tensor (3x faster step on CPU)
        opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay, betas=(0.9, 0.98),
                                fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay, betas=(0.9, 0.98))
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    return model, opt


def _ema_start(model, tcfg: TrainConfig, state: dict | None):
    """The moving average of the weights (a state dict of copies), restored when resuming; None without ema."""
    if not tcfg.ema:
        return None
    if state is not None and state.get("ema"):
        return {k: v.clone() for k, v in state["ema"].items()}
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _ema_update(ema: dict, model, decay: float, step: int) -> None:
    """ema <- d ema + (1 - d) weights, with d = min(decay, (1 + step) / (10 + step)) so that the first steps'
    weights do not dominate; integer buffers are copied."""
    import torch

    d = min(decay, (1 + step) / (10 + step))
    with torch.no_grad():
        for k, v in model.state_dict().items():
            if v.is_floating_point():
                ema[k].mul_(d).add_(v.detach(), alpha=1 - d)
            else:
                ema[k].copy_(v)


def _lr_at(tcfg: TrainConfig, s: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if s < tcfg.warmup:
        return tcfg.lr * (s + 1) / tcfg.warmup
    p = (s - tcfg.warmup) / max(1, tcfg.steps - tcfg.warmup)
    return tcfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def _step(model, opt, emb, tokens, tcfg: TrainConfig, step: int, device, ema: dict | None = None) -> float:
    """One optimizer step on a batch drawn for ``step`` (and the weights' moving average ``ema`` moved after
    it, when kept); returns the loss."""
    import torch
    import torch.nn.functional as F

    # Each step draws from its own seeded generator, so a resumed run takes the same batches.
    g = torch.Generator().manual_seed(tcfg.seed * 1_000_003 + step)
    torch.manual_seed(tcfg.seed * 1_000_003 + step)  # dropout
    idx = torch.randint(0, len(tokens), (tcfg.batch_size,), generator=g)
    x, tok = emb[idx], tokens[idx]  # (B, D), (B, L)
    if tcfg.noise_std > 0:
        level = tcfg.noise_min + (tcfg.noise_std - tcfg.noise_min) * torch.rand(len(idx), 1, generator=g)
        x = normalize_t(x + level * torch.randn(x.shape, generator=g))
    L = int((tok != PAD).sum(1).max())
    tok = tok[:, :L].to(device)
    for group in opt.param_groups:
        group["lr"] = _lr_at(tcfg, step)
    h = model(x.to(device), tok[:, :-1], hidden=True)  # (B, L-1, C)
    tgt = tok[:, 1:]
    keep = tgt != PAD  # the vocabulary head is most of the cost: apply it to real targets only
    loss = F.cross_entropy(model.head(h[keep]), tgt[keep])  # (n, V) vs (n,)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if ema is not None:
        _ema_update(ema, model, tcfg.ema, step + 1)
    return loss.item()
