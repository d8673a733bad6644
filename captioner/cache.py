"""The embedding cache: one safetensors file of (N, D) float32 rows plus a JSON sidecar per
(encoder, dataset, split, modality).

The file name encodes every parameter that changes the bytes, so a cache is reused exactly when the key
matches; a file whose sidecar disagrees with what is asked for is refused with a message that says why.
Writes are atomic (temp file + rename), and long runs resume from partial shards after a crash.
One process builds a key at a time (a lock per key); a damaged file is moved aside and rebuilt.
Several processes (``accelerate launch``) split the chunks between them and the main one assembles them.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from captioner.artifacts import key_lock, quarantine
from captioner.datasets import CaptionDataset
from captioner.errors import BadImageError, CacheMismatchError, CaptionerError, DamagedArtifactError
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
    sidecar, else CacheMismatchError names the field that differs; a file that cannot be read (truncated,
    zero bytes, a garbled sidecar) raises DamagedArtifactError naming it."""
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".safetensors")
    side = sidecar(path)
    if not path.exists() or not side.exists():
        raise CaptionerError(f"{path}: no embedding cache here (need the .safetensors and its .json sidecar); "
                             "write one with `captioner embed`")
    meta = _read_sidecar(side)
    for k, v in (expect or {}).items():
        got = meta.get(k)
        if k == "encoder" and isinstance(v, dict):
            got = got if isinstance(got, dict) else None
            diff = [f for f in ("name", "weights_hash", "dim", "pooling") if got and got.get(f) != v.get(f)]
            if got is None or diff:
                raise CacheMismatchError(
                    f"{path}: written by encoder {got and got.get('name')!r} "
                    f"({', '.join(f'{f}={got.get(f)!r}' for f in diff) if got else 'no encoder recorded'}), "
                    f"not {v.get('name')!r}; re-run `captioner embed` with --force or pick the matching cache")
        elif got != v:
            raise CacheMismatchError(f"{path}: {k} is {got!r}, expected {v!r}; re-run `captioner embed`")
    X = _read_array(path)
    if X.shape != (meta["N"], meta["D"]) or len(meta["ids"]) != X.shape[0] \
            or len(meta["sample_ids"]) != X.shape[0]:
        raise DamagedArtifactError(f"{path}: array is {X.shape} but its sidecar says ({meta['N']}, {meta['D']}) "
                                   f"with {len(meta['ids'])} ids; the cache is damaged, re-run `captioner embed`")
    return EmbeddingSet(X=X, ids=meta["ids"], sample_ids=meta["sample_ids"], meta=meta, path=path)


def _read_sidecar(side: Path) -> dict:
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DamagedArtifactError(f"{side}: not valid JSON ({e}); the cache sidecar is damaged, "
                                   "re-run `captioner embed`") from None
    bad = [k for k, t in (("N", int), ("D", int), ("ids", list), ("sample_ids", list)) if
           not isinstance(meta, dict) or not isinstance(meta.get(k), t)] if isinstance(meta, dict) else ["*"]
    if bad:
        raise DamagedArtifactError(f"{side}: sidecar lacks {', '.join(bad)}; the cache is damaged, "
                                   "re-run `captioner embed`")
    return meta


def _read_array(path: Path) -> np.ndarray:
    from safetensors.numpy import load_file

    try:
        X = load_file(str(path))["X"]
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types on damaged files
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise DamagedArtifactError(f"{path}: not a readable safetensors file ({msg}); the cache is damaged, "
                                   "re-run `captioner embed`") from None
    if X.ndim != 2:
        raise DamagedArtifactError(f"{path}: array has shape {X.shape}, not (N, D); the cache is damaged")
    return X


def _same_json(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _reuse(path: Path, key: str, fp: dict, dataset: CaptionDataset, modality: str, name: str):
    """The cache at ``path`` if it holds this key, None if there is none (or it was damaged and moved aside)."""
    if not (path.exists() and sidecar(path).exists()):
        return None
    try:
        meta = _read_sidecar(sidecar(path))
        if meta.get("key") != key:
            raise CacheMismatchError(
                f"{path}: holds embeddings of {(meta.get('encoder') or {}).get('name')!r} on "
                f"{meta.get('dataset')}/{meta.get('split')} ({meta.get('modality')}), not {name!r} on "
                f"{dataset.name}/{dataset.split} ({modality}); use another --out or --force to overwrite")
        want = {"encoder": fp, "dataset": dataset.name, "split": dataset.split, "modality": modality}
        edited = [k for k, v in want.items() if not _same_json(meta.get(k), v)]
        if edited:  # the key matches but what it was made from does not: the sidecar was edited
            raise DamagedArtifactError(f"{sidecar(path)}: records {', '.join(edited)} that do not match its key")
        return load_embeddings(path, expect={"key": key})
    except DamagedArtifactError as e:
        quarantine(path, str(e).split(": ", 1)[-1].split(";")[0], sidecar(path))
        return None


def _sources_sig(items, modality: str) -> str:
    """Size and mtime of every image file (the names are in the key already): a repaired or replaced
    image makes new partial chunks instead of reusing a chunk that recorded its old failure."""
    if modality != "image":
        return "t"
    h = hashlib.sha256()
    for src in items:
        if isinstance(src, (str, os.PathLike)):
            try:
                st = os.stat(src)
                h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
            except OSError as e:
                h.update(f"err{e.errno}".encode())
        h.update(b"\x00")
    return h.hexdigest()[:8]


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

    Several processes asking for one cache at once: the first builds it under the key's lock, the others
    wait and load its result. A cache that fails to load is moved aside (``*.damaged-<time>``) and rebuilt.
    """
    if isinstance(encoder, str):
        from captioner.encoders import get_encoder

        encoder = get_encoder(encoder, device=device)
    modality = modality or encoder.modality
    if modality != encoder.modality:
        raise CaptionerError(f"encoder {encoder.name!r} encodes {encoder.modality}s, not {modality}s")
    fp = encoder.fingerprint()
    key = cache_key(fp, dataset, modality)
    path = Path(out) if out else default_path(fp, dataset, modality)
    from captioner.distributed import agree

    agree("the embedding cache to write", {"encoder": fp.get("name"), "dataset": f"{dataset.name}/{dataset.split}",
                                           "modality": modality, "key": key, "path": str(path), "force": force})
    state = _dist_state()
    args = (encoder, dataset, modality, batch_size, force, progress, path, fp, key, state)
    if state["world"] > 1:  # ranks split the chunks of one build between them (barriers, not a lock)
        return _embed_unlocked(*args)
    with key_lock(path, what=f"the {modality} cache {path.name}"):
        return _embed_unlocked(*args)


def _embed_unlocked(encoder, dataset, modality, batch_size, force, progress, path, fp, key, state):
    if not force:
        es = _reuse(path, key, fp, dataset, modality, encoder.name)
        if es is not None:
            return es
    ids, sids, items = _rows(dataset, modality)
    if not items:
        raise CaptionerError(f"{dataset.name}/{dataset.split}: nothing to encode ({modality}s)")
    order = np.arange(len(items))
    if modality == "text":  # encode similar lengths together: less padding, same result
        order = np.argsort([len(t) for t in items], kind="stable")
    partial = path.parent / f".{path.stem}.{key[:8]}-{_sources_sig(items, modality)}.partial"
    if state["world"] == 1:  # chunks of other inputs (or all of them on --force) are stale: we hold the lock
        for old in path.parent.glob(f".{glob.escape(path.stem)}.*.partial"):
            if old != partial or force:
                shutil.rmtree(old, ignore_errors=True)
    partial.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    _encode_chunks(encoder, dataset, modality, batch_size, progress, state, partial, ids, items, order)
    if state["world"] > 1:
        state["barrier"]()
        if state["rank"] != 0:
            state["barrier"]()
            return load_embeddings(path, expect={"key": key})
        n_chunks = (len(items) + CHUNK - 1) // CHUNK
        missing = [c for c in range(n_chunks) if not (partial / f"{c:06d}.npz").exists()]
        if missing:
            raise CaptionerError(f"{partial}: chunk {missing[0]} (of process {missing[0] % state['world']}) is not "
                                 "there although every process finished; the processes must share this folder "
                                 "(one filesystem for $CAPTIONER_HOME or --out)")
    es = _assemble(encoder, dataset, modality, path, fp, key, partial, ids, sids, items, t0)
    shutil.rmtree(partial, ignore_errors=True)
    if state["world"] > 1:
        state["barrier"]()
    return es


def _encode_chunks(encoder, dataset, modality, batch_size, progress, state, partial, ids, items, order):
    """Encode this rank's missing chunks of CHUNK rows into ``partial/<chunk>.npz`` (atomic writes)."""
    from tqdm.auto import tqdm

    n_chunks = (len(items) + CHUNK - 1) // CHUNK
    mine = [c for c in range(n_chunks) if c % state["world"] == state["rank"]]
    todo = [c for c in mine if not (partial / f"{c:06d}.npz").exists()]
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


def _assemble(encoder, dataset, modality, path, fp, key, partial, ids, sids, items, t0) -> EmbeddingSet:
    """Gather the chunks into the cache file and its sidecar (array first, sidecar last)."""
    from safetensors.numpy import save

    X = np.zeros((len(items), encoder.dim), np.float32)
    ok = np.zeros(len(items), bool)
    skipped = []
    for c in range((len(items) + CHUNK - 1) // CHUNK):
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
    # Array first, sidecar last: a cache counts as present only once its sidecar exists.
    atomic_write_bytes(path, save({"X": np.ascontiguousarray(X[keep])}))
    atomic_write_json(sidecar(path), meta)
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
