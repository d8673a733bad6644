"""Image-encoding throughput of EfficientNet-Lite0 at 224 px on this machine (a benchmark, not a test).

Baseline: plain eager PyTorch as a first user would write it: decode and preprocess one image at a time,
NCHW float32 under ``torch.no_grad``, default threads. Ours (``captioner.encoders``): batched decode and
preprocessing in a thread pool, channels-last, ``torch.inference_mode``, micro-batches of 4 images per forward (a batch of 32 spills out of cache on CPU); and
optionally a frozen TorchScript graph (conv + BN folded). All variants run in one process on the same
images, interleaved, so that the ratio is meaningful on a shared, noisy machine.

    python bench/encode_throughput.py [--n 96] [--rounds 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=96, help="images per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--json", action="store_true", help="print only the JSON")
    args = ap.parse_args(argv)

    import torch

    from captioner.datasets import get_dataset
    from captioner.encoders import get_encoder
    from captioner.encoders.base import preprocess_image
    from captioner.images import load_image

    paths = [s.source for s in get_dataset("tuxpaint", "all").samples][: args.n]
    enc = get_encoder("efficientnet-lite0")
    model = enc.model

    # Baseline model: a separate NCHW copy, eager, no_grad, one image per call.
    import copy

    base_model = copy.deepcopy(model).to(memory_format=torch.contiguous_format).eval()

    def baseline():
        out = []
        with torch.no_grad():
            for p in paths:
                x = torch.from_numpy(preprocess_image(load_image(p), size=224))[None]  # (1, 3, 224, 224)
                out.append(base_model.extract_features(x).mean((2, 3)))
        return torch.cat(out).numpy()

    def ours():
        from captioner.cache import _load_images

        out = []
        for b in range(0, len(paths), args.batch_size):
            ims, _ = _load_images(paths[b:b + args.batch_size])
            out.append(enc.encode(ims))
        return np.concatenate(out)

    with torch.inference_mode():
        x0 = torch.randn(enc.micro_batch, 3, 224, 224).contiguous(memory_format=torch.channels_last)
        from captioner.encoders.onnx_export import feature_module

        frozen = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(feature_module(model), x0)))

    def ours_frozen():
        from captioner.cache import _load_images

        out = []
        for b in range(0, len(paths), args.batch_size):
            ims, _ = _load_images(paths[b:b + args.batch_size])
            x = torch.from_numpy(enc.preprocess(ims)).contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                mb = enc.micro_batch
                out += [frozen(x[i:i + mb]).numpy() if len(x[i:i + mb]) == mb
                        else enc.forward_tensor(x[i:i + mb]).numpy() for i in range(0, len(x), mb)]
        return np.concatenate(out)

    variants = {"baseline_eager": baseline, "ours": ours, "ours_frozen_jit": ours_frozen}
    ref = baseline()
    agree = {k: float(np.abs(f() - ref).max()) for k, f in variants.items() if k != "baseline_eager"}
    times = {k: [] for k in variants}
    load_before = [round(x, 2) for x in os.getloadavg()]
    for _ in range(args.rounds):
        for k, f in variants.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    res = {
        "machine": {"cores": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads()},
        "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        "images": len(paths), "rounds": args.rounds, "size": 224,
        "images_per_s": {k: round(len(paths) / statistics.median(v), 2) for k, v in times.items()},
        "max_abs_diff_vs_baseline": agree,
        "first_measurement_img_s": 7.0, "target_img_s": 10.5,
    }
    ips = res["images_per_s"]
    res["speedup_vs_baseline"] = {k: round(ips[k] / ips["baseline_eager"], 2) for k in ips}
    res["vs_first_measurement"] = {k: round(ips[k] / 7.0, 2) for k in ips}
    print(json.dumps(res, indent=2))
    if not args.json:
        print("\n| variant | images/s | x baseline (same run) | x 7 img/s |\n|---|---|---|---|")
        for k in ips:
            print(f"| {k} | {ips[k]} | {res['speedup_vs_baseline'][k]} | {res['vs_first_measurement'][k]} |")
        la = res["load_average"]
        print(f"\nload average {la['before']} -> {la['after']} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
