"""The embedding cache: one safetensors file of (N, D) float32 rows plus a JSON sidecar per
(encoder, dataset, split, modality).

The file name encodes every parameter that changes the bytes, so a cache is reused exactly when the key
matches; a file whose sidecar disagrees with what is asked for is refused with a message that says why.
Writes are atomic (temp file + rename), and long runs resume from partial shards after a crash.
Several processes (``accelerate launch``) split the chunks between them and the main one assembles them.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from captioner.datasets import CaptionDataset
from captioner.errors import BadImageError, CacheMismatchError, CaptionerError
from captioner.paths import atomic_write_bytes, atomic_write_json, slug, subdir

FORMAT_VERSION = 1
CHUNK = 256  # rows per resumable shard


@dataclass
class EmbeddingSet:
    X: np.ndarray  # (N, D) float32
    ids: list  # image rows: sample ids; text rows: "<sample id>#<caption index>"
    sample_ids: list  # the sample each row belongs to
    meta: dict
    path: Path | None = None

    @property
    def texts(self) -> list | None:
        return self.meta.get("texts")

    def __len__(self):
        return len(self.ids)


def cache_key(fingerprint: dict, dataset: CaptionDataset, modality: str) -> str:
    blob = json.dumps({"v": FORMAT_VERSION, "encoder": fingerprint, "dataset": dataset.name,
                       "split": dataset.split, "content": dataset.key(), "modality": modality}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default_path(fingerprint: dict, dataset: CaptionDataset, modality: str) -> Path:
    key = cache_key(fingerprint, dataset, modality)
    name = f"{slug(dataset.name)}-{slug(dataset.split)}-{modality}-{slug(fingerprint['name'])}-{key[:8]}"
    return subdir("embeddings") / f"{name}.safetensors"


def sidecar(path: Path) -> Path:
    return Path(path).with_suffix(".json")


def load_embeddings(path, expect: dict | None = None) -> EmbeddingSet:
    """Load a cache file. ``expect`` (e.g. ``{"encoder": fingerprint, "modality": "text"}``) must match the
    sidecar, else CacheMismatchError names the field that differs."""
    from safetensors.numpy import load_file

    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".safetensors")
    side = sidecar(path)
    if not path.exists() or not side.exists():
        raise CaptionerError(f"{path}: no embedding cache here (need the .safetensors and its .json sidecar); "
                             "write one with `captioner embed`")
    meta = json.loads(side.read_text())
    for k, v in (expect or {}).items():
        got = meta.get(k)
        if k == "encoder" and isinstance(v, dict):
            diff = [f for f in ("name", "weights_hash", "dim", "pooling") if got and got.get(f) != v.get(f)]
            if got is None or diff:
                raise CacheMismatchError(
                    f"{path}: written by encoder {got and got.get('name')!r} "
                    f"({', '.join(f'{f}={got.get(f)!r}' for f in diff) if got else 'no encoder recorded'}), "
                    f"not {v.get('name')!r}; re-run `captioner embed` with --force or pick the matching cache")
        elif got != v:
            raise CacheMismatchError(f"{path}: {k} is {got!r}, expected {v!r}; re-run `captioner embed`")
    X = load_file(str(path))["X"]
    if X.shape != (meta["N"], meta["D"]):
        raise CacheMismatchError(f"{path}: array is {X.shape} but its sidecar says ({meta['N']}, {meta['D']}); "
                                 "the file is damaged, delete it and re-run `captioner embed`")
    return EmbeddingSet(X=X, ids=meta["ids"], sample_ids=meta["sample_ids"], meta=meta, path=path)


def _rows(dataset: CaptionDataset, modality: str):
    """(ids, sample_ids, items) to encode: one row per image, or one per non-empty caption."""
    if modality == "image":
        return [s.id for s in dataset.samples], [s.id for s in dataset.samples], [s.source for s in dataset.samples]
    ids, sids, texts = [], [], []
    for s in dataset.samples:
        for j, c in enumerate(s.captions):
            if c and c.strip():
                ids.append(f"{s.id}#{j}")
                sids.append(s.id)
                texts.append(c.strip())
    return ids, sids, texts


_LOADER: ThreadPoolExecutor | None = None


def _load_images(sources):
    """Decode a batch in threads; returns (images, errors) with None in place of the bad ones."""
    global _LOADER
    from captioner.images import load_image

    def one(src):
        try:
            return load_image(src), None
        except BadImageError as e:
            return None, str(e)

    if _LOADER is None:
        _LOADER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="decode")
    res = list(_LOADER.map(one, sources))
    return [r[0] for r in res], [r[1] for r in res]


def embed(encoder, dataset: CaptionDataset, modality: str | None = None, batch_size: int = 32,
          device: str = "cpu", force: bool = False, progress: bool = True, out: Path | None = None,
          ) -> EmbeddingSet:
    """Encode ``dataset`` with ``encoder`` (a registry name or an Encoder) into the cache, or reuse it.

    Parameters
    ----------
    modality : "image" or "text"; defaults to the encoder's.
    force : re-encode even when a matching cache exists (and overwrite a mismatching ``out``).
    out : explicit cache path; by default a name under ``$CAPTIONER_HOME/embeddings`` built from the key.

    Returns
    -------
    EmbeddingSet with X (N, D) float32. Unreadable images are skipped, listed in ``meta["skipped"]``.
    """
    from tqdm.auto import tqdm

    if isinstance(encoder, str):
        from captioner.encoders import get_encoder

        encoder = get_encoder(encoder, device=device)
    modality = modality or encoder.modality
    if modality != encoder.modality:
        raise CaptionerError(f"encoder {encoder.name!r} encodes {encoder.modality}s, not {modality}s")
    fp = encoder.fingerprint()
    key = cache_key(fp, dataset, modality)
    path = Path(out) if out else default_path(fp, dataset, modality)
    expect = {"key": key}
    from captioner.distributed import agree

    agree("the embedding cache to write", {"encoder": fp.get("name"), "dataset": f"{dataset.name}/{dataset.split}",
                                           "modality": modality, "key": key, "path": str(path), "force": force})
    if path.exists() and sidecar(path).exists() and not force:
        meta = json.loads(sidecar(path).read_text())
        if meta.get("key") == key:
            return load_embeddings(path, expect=expect)
        raise CacheMismatchError(
            f"{path}: holds embeddings of {meta.get('encoder', {}).get('name')!r} on "
            f"{meta.get('dataset')}/{meta.get('split')} ({meta.get('modality')}), not {encoder.name!r} on "
            f"{dataset.name}/{dataset.split} ({modality}); use another --out or --force to overwrite")

    ids, sids, items = _rows(dataset, modality)
    if not items:
        raise CaptionerError(f"{dataset.name}/{dataset.split}: nothing to encode ({modality}s)")
    order = np.arange(len(items))
    if modality == "text":  # encode similar lengths together: less padding, same result
        order = np.argsort([len(t) for t in items], kind="stable")

    state = _dist_state()
    partial = path.parent / f".{path.stem}.{key[:8]}.partial"
    partial.mkdir(parents=True, exist_ok=True)
    n_chunks = (len(items) + CHUNK - 1) // CHUNK
    mine = [c for c in range(n_chunks) if c % state["world"] == state["rank"]]
    todo = [c for c in mine if not (partial / f"{c:06d}.npz").exists()]
    t0 = time.time()
    bar = tqdm(total=sum(min(CHUNK, len(items) - c * CHUNK) for c in todo), unit="text" if modality == "text" else "img",
               desc=f"embed {dataset.name}/{dataset.split} {encoder.name}",
               disable=not progress or state["rank"] != 0, leave=False)
    for c in todo:
        idx = order[c * CHUNK:(c + 1) * CHUNK]
        X = np.zeros((len(idx), encoder.dim), np.float32)
        ok = np.ones(len(idx), bool)
        errors = []
        for b in range(0, len(idx), batch_size):
            bi = idx[b:b + batch_size]
            if modality == "image":
                ims, errs = _load_images([items[i] for i in bi])
                good = [k for k, im in enumerate(ims) if im is not None]
                for k, e in enumerate(errs):
                    if e:
                        ok[b + k] = False
                        errors.append([ids[bi[k]], e])
                if good:
                    X[[b + k for k in good]] = encoder.encode([ims[k] for k in good])
            else:
                X[b:b + len(bi)] = encoder.encode([items[i] for i in bi])
            bar.update(len(bi))
        if not np.isfinite(X).all():
            raise CaptionerError(f"{encoder.name} produced NaN/inf embeddings on {dataset.name}/{dataset.split} "
                                 f"(chunk {c}); check the encoder's weights and dtype")
        buf = _npz_bytes(idx=idx, X=X, ok=ok, errors=np.array(json.dumps(errors)))
        atomic_write_bytes(partial / f"{c:06d}.npz", buf)
    bar.close()
    if state["world"] > 1:
        state["barrier"]()
        if state["rank"] != 0:
            state["barrier"]()
            return load_embeddings(path, expect=expect)
        missing = [c for c in range(n_chunks) if not (partial / f"{c:06d}.npz").exists()]
        if missing:
            raise CaptionerError(f"{partial}: chunk {missing[0]} (of process {missing[0] % state['world']}) is not "
                                 "there although every process finished; the processes must share this folder "
                                 "(one filesystem for $CAPTIONER_HOME or --out)")

    X = np.zeros((len(items), encoder.dim), np.float32)
    ok = np.zeros(len(items), bool)
    skipped = []
    for c in range(n_chunks):
        with np.load(partial / f"{c:06d}.npz") as z:
            X[z["idx"]] = z["X"]
            ok[z["idx"]] = z["ok"]
            skipped += json.loads(str(z["errors"]))
    keep = np.flatnonzero(ok)
    if len(keep) == 0:
        raise CaptionerError(f"{dataset.name}/{dataset.split}: every {modality} failed to load "
                             f"(first: {skipped[0][1] if skipped else '?'}); nothing written")
    meta = {
        "format": FORMAT_VERSION, "key": key, "encoder": fp, "dataset": dataset.name, "split": dataset.split,
        "dataset_key": dataset.key(), "modality": modality, "pooling": fp.get("pooling"),
        "N": len(keep), "D": int(encoder.dim), "ids": [ids[i] for i in keep],
        "sample_ids": [sids[i] for i in keep], "skipped": skipped, "n_skipped": len(skipped),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.time() - t0, 3),
    }
    if modality == "text":
        meta["texts"] = [items[i] for i in keep]
    from safetensors.numpy import save

    # Array first, sidecar last: a cache counts as present only once its sidecar exists.
    atomic_write_bytes(path, save({"X": np.ascontiguousarray(X[keep])}))
    atomic_write_json(sidecar(path), meta)
    shutil.rmtree(partial, ignore_errors=True)
    if state["world"] > 1:
        state["barrier"]()
    return EmbeddingSet(X=X[keep], ids=meta["ids"], sample_ids=meta["sample_ids"], meta=meta, path=path)


def _npz_bytes(**arrays) -> bytes:
    import io

    b = io.BytesIO()
    np.savez(b, **arrays)
    return b.getvalue()


def _dist_state() -> dict:
    """Rank and world size under ``accelerate launch``; a single process otherwise."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from captioner.distributed import collective, process_state

        st = process_state()

        def barrier():
            with collective("the embedding cache's barrier"):
                st.wait_for_everyone()

        return {"rank": st.process_index, "world": st.num_processes, "barrier": barrier}
    return {"rank": 0, "world": 1, "barrier": lambda: None}


def paired(image_set: EmbeddingSet, text_set: EmbeddingSet, reduce: str = "first"):
    """Rows of both sets that belong to the same sample, in the same order.

    ``reduce``: "first" caption per sample, or "mean" of the sample's caption embeddings.
    Returns (X (M, D1), Y (M, D2), sample_ids)."""
    by_sample: dict = {}
    for r, sid in enumerate(text_set.sample_ids):
        by_sample.setdefault(sid, []).append(r)
    rows_x, rows_y, sids = [], [], []
    for r, sid in enumerate(image_set.sample_ids):
        if sid in by_sample:
            rows_x.append(r)
            rows_y.append(by_sample[sid])
            sids.append(sid)
    if not rows_x:
        raise CaptionerError("the image and text caches share no sample ids; were they made from one dataset split?")
    X = image_set.X[rows_x]
    if reduce == "first":
        Y = text_set.X[[r[0] for r in rows_y]]
    elif reduce == "mean":
        Y = np.stack([text_set.X[r].mean(0) for r in rows_y])
    else:
        raise ValueError(f"reduce must be 'first' or 'mean', not {reduce!r}")
    return X, Y, sids
