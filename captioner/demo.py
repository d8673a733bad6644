"""The Gradio demo: caption an image, classify it zero-shot, and inspect how well the two encoders align.

``build_app(pipeline)`` returns a ``gr.Blocks`` with three tabs; ``launch(app)`` serves it on 127.0.0.1.
The work is done by :class:`DemoHandlers`, whose methods are plain functions of plain values (a file path,
a string, a number) so that tests call them without a server. Every handler returns a status message as
its last output: empty on success, one readable line otherwise. Bad input (a file that is not an image, a
truncated PNG, an empty label list ...) never reaches the page as a traceback, and the server stays up.

Offline: Gradio's default theme ships its fonts (no Google Fonts request), analytics and the version check
are off (``GRADIO_ANALYTICS_ENABLED=False``), SSR is off (it would need Node), and the examples are files
written under ``$CAPTIONER_HOME`` at start.
"""
from __future__ import annotations

import html
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable

# Read by gradio when the Blocks are built and at launch: no analytics, no version check over the network.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from captioner.captioners import CAPTIONERS, captioner_names, get_captioner  # noqa: E402
from captioner.demo_inputs import (  # noqa: E402,F401  (re-exported: the demo's public names)
    DECODE_CONCURRENCY,
    DECODE_SLOTS,
    EXAMPLE_PHOTOS,
    EXAMPLE_STAMP_CATEGORIES,
    FAST_TEMPLATES,
    FULL_PROMPT_LABELS,
    MAX_LABEL_CHARS,
    MAX_LABEL_TEXT,
    MAX_LABELS,
    MAX_TOP_K,
    MAX_UPLOAD,
    TUXPAINT_STAMPS,
    DemoInputError,
    decode_image,
    encoder_choices,
    encoder_name,
    example_images,
    fmt_ms,
    image_source,
    label_sets,
    parse_labels,
    tuxpaint_categories,
)
from captioner.errors import CaptionerError  # noqa: E402
from captioner.lru import LRU  # noqa: E402
from captioner.photocaption import shown_caption  # noqa: E402

log = logging.getLogger(__name__)

MAX_PIPELINES = 3            # encoder pairs kept besides the default one (least recently used goes first)
MAX_REPORTS = 16             # alignment reports kept
DEFAULT_CONCURRENCY = 2      # queue workers; the pipeline itself runs one request at a time (a lock)
QUEUE_MAX_SIZE = 64          # beyond this the page says "queue full" instead of the server swelling
# torch intra-op threads while serving. A request is one image; on this two-core machine shared with other
# work, two threads that wait on each other made a caption 5x slower (1.3 s vs 0.23 s median at load 7)
# than one thread. Warm-up (embedding the train set, training the decoder) runs before this applies.
SERVING_TORCH_THREADS = 1
# The same goes for numpy's BLAS pool (OpenBLAS): a (1, 1280) x (1280, 384) product took 6-10 ms with two
# threads on the loaded machine and 0.1 ms on one, so serving limits it too (set_serving_threads).

def set_serving_threads(n: int | None = SERVING_TORCH_THREADS) -> None:
    """Threads for serving one request at a time: torch's intra-op pool (when torch is loaded; onnxruntime
    follows it) and numpy's BLAS pools (through threadpoolctl, when installed). ``None`` or 0: leave both."""
    if not n:
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(n))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=int(n), user_api="blas")


# ---------------------------------------------------------------------------------------------------------
# Handlers: plain functions of plain values
# ---------------------------------------------------------------------------------------------------------


class DemoHandlers:
    """The app's request handlers around one default pipeline and a cache of the others.

    Parameters
    ----------
    pipeline
        An object following the ``Pipeline`` contract (``caption``, ``classify``, ``alignment_report``,
        ``rotations``, ``warmup``).
    factory
        ``factory(image_encoder, text_encoder) -> pipeline`` for another encoder pair; default: the
        pipeline's own class with the same device.
    notify
        ``notify(message)`` for news worth a toast (the page sets ``gr.Info``); default: the log.
    """

    def __init__(self, pipeline, factory: Callable[[str, str], Any] | None = None,
                 notify: Callable[[str], None] | None = None, classifier: Callable | None = None):
        self.notify = notify or log.info
        self.default_pair = (encoder_name(pipeline, "image", "efficientnet-lite0"),
                             encoder_name(pipeline, "text", "minilm-l6"))
        if factory is None:
            device = getattr(pipeline, "device", "cpu")
            device = device if isinstance(device, str) else str(device)

            def factory(i, t, _cls=type(pipeline)):
                return _cls(image_encoder=i, text_encoder=t, device=device, progress=False)
        self.factory = factory
        # Bounded: a server must not keep every encoder pair (each holds models and caches) or report.
        self._pipelines = LRU(MAX_PIPELINES, pinned=[self.default_pair])
        self._pipelines[self.default_pair] = pipeline
        self._locks = {self.default_pair: threading.Lock()}
        self._build_lock = threading.Lock()
        self._reports = LRU(MAX_REPORTS)
        self.image_choices, self.text_choices = encoder_choices(pipeline)
        self.rotations = list(getattr(pipeline, "rotations", None) or ["paired", "pairfree"])  # fakes in tests
        self.default_rotation = "head" if "head" in self.rotations else self.rotations[0]  # captions.md: no pair
        if classifier is None and hasattr(pipeline, "caption_bank"):  # a real pipeline: the CLI's default too
            from captioner.photocaption import ClassifierCaptioner

            classifier = ClassifierCaptioner(type(pipeline), self.default_pair[1], getattr(pipeline, "device", "cpu"),
                                             progress=bool(getattr(pipeline, "progress", False)))
        self.classifier = classifier
        # captions.md: the classifier names the validation photos' subject most often; a fake has only rotations
        self.captioners = (["classifier"] if classifier is not None else []) + captioner_names(uses_rotation=True)
        self.default_captioner = "classifier" if classifier is not None else "decoder"  # as the demo always did

    # -- pipelines -------------------------------------------------------------------------------------
    def pipeline(self, image_encoder: str | None = None, text_encoder: str | None = None):
        """The (cached) pipeline for an encoder pair and its lock, built on first use.

        A new pair is not warmed up: each request builds only what it needs (bank and rotation for
        retrieval; the decoder, trained on first use, only when decoding)."""
        key = (image_encoder or self.default_pair[0], text_encoder or self.default_pair[1])
        got = self._pipelines.get(key)
        if got is not None:
            return got, self._locks[key]
        for name, allowed in ((key[0], self.image_choices), (key[1], self.text_choices)):
            if not isinstance(name, str) or name not in allowed:  # only what the dropdowns list: no paths
                shown = name[:80] if isinstance(name, str) else type(name).__name__
                raise DemoInputError(f"unknown encoder {shown!r}; pick one from the list")
        with self._build_lock:  # two requests for a new pair build it once
            if key not in self._pipelines:
                self.notify(f"first use of {key[0]} + {key[1]}: embedding the train set and fitting the "
                            "rotation (this can take minutes on a CPU)")
                try:
                    p = self.factory(*key)
                except CaptionerError as e:
                    raise DemoInputError(f"cannot use {key[0]} + {key[1]}: {e}") from None
                self._locks[key] = threading.Lock()
                self._pipelines[key] = p  # may evict the least recently used other pair
                for k in [k for k in self._locks if k not in self._pipelines and k != key]:
                    del self._locks[k]
            p = self._pipelines.get(key) or p
        return p, self._locks[key]

    def _rotation(self, rotation: str | None) -> str:
        rotation = rotation or self.rotations[0]
        if rotation not in self.rotations:
            raise DemoInputError(f"unknown rotation {rotation!r}; choose one of {', '.join(self.rotations)}")
        return rotation

    @staticmethod
    def _top_k(top_k, hi: int = MAX_TOP_K) -> int:
        try:
            k = int(top_k if top_k is not None else 5)
        except (TypeError, ValueError):
            raise DemoInputError(f"top-k must be a whole number, not {top_k!r}") from None
        return max(1, min(hi, k))

    # -- the three tabs ---------------------------------------------------------------------------------
    def caption(self, image, rotation="paired", image_encoder=None, text_encoder=None, top_k=5,
                decode=True, captioner="decoder") -> tuple[str, list[list], str, str]:
        """Caption one image with a ``captioner.captioners`` kind: through ``rotation`` by "retrieval", or
        "decoder" (retrieval plus the decoder, unless ``decode`` is off; "rotation" is its older name), or by
        the image encoder's ImageNet head with "classifier" (:mod:`captioner.photocaption`; the rotation, the
        encoder pair and ``decode`` do not apply).

        Returns
        -------
        (caption, rows, timings, status)
            ``rows``: ``[[rank, retrieved caption, score], ...]`` (top-k, best first); ``timings``: one
            line of milliseconds; ``status``: empty on success, else the reason nothing was captioned.
        """
        try:
            kind = get_captioner(captioner, known=self.captioners)  # a CaptionerError: one line on the page
            rotation = self._rotation(rotation)
            k = self._top_k(top_k)
            im, decode_ms = decode_image(image)
            if not kind.uses_rotation:  # the classifier; no decoder: its timing (0) is not shown
                out = self.classifier([im], top_k=k)[0]
                out["timings_ms"] = {n: v for n, v in out.get("timings_ms", {}).items() if n != "decode"}
            else:
                pipe, lock = self.pipeline(image_encoder, text_encoder)
                with lock:
                    out = pipe.caption([im], top_k=k, rotation=rotation, decode=kind.decode and bool(decode))[0]
            rows = [[i + 1, r["caption"], round(float(r["score"]), 4)] for i, r in enumerate(out["retrieved"])]
            timings = {"image_decode": decode_ms, **out.get("timings_ms", {})}
            return shown_caption(out), rows, fmt_ms(timings), ""
        except Exception as e:  # noqa: BLE001 - the page gets one line, the log the traceback
            return "", [], "", _status(e)

    def classify(self, image, labels_text, rotation="paired", image_encoder=None, text_encoder=None,
                 top_k=5) -> tuple[dict, list[list], str]:
        """Zero-shot classify one image against the labels in ``labels_text``.

        Returns
        -------
        (probs, rows, status)
            ``probs``: ``{label: prob}`` of the top-k (what ``gr.Label`` draws as bars); ``rows``:
            ``[[label, prob], ...]`` best first; ``status``: a note when labels were cut, or why nothing
            was classified.
        """
        try:
            rotation = self._rotation(rotation)
            k = self._top_k(top_k)
            pipe, lock = self.pipeline(image_encoder, text_encoder)
            fast = _accepts(pipe.classify, "templates")
            labels, note = parse_labels(labels_text, MAX_LABELS if fast else FULL_PROMPT_LABELS)
            if len(labels) < 2:
                raise DemoInputError(f"only one label ({labels[0]!r}): zero-shot needs at least two to choose "
                                     "between")
            kw = {"templates": FAST_TEMPLATES} if fast and len(labels) > FULL_PROMPT_LABELS else {}
            if kw:
                note = "; ".join(filter(None, [note, f"above {FULL_PROMPT_LABELS} labels each is prompted with "
                                                     f"one template ({FAST_TEMPLATES[0]!r}), not 80"]))
            im, _ = decode_image(image)
            with lock:
                out = pipe.classify([im], labels, top_k=min(k, len(labels)), rotation=rotation, **kw)[0]
            top = [(r["label"], float(r["prob"])) for r in out["labels"]]
            return dict(top), [[lab, round(p, 4)] for lab, p in top], note
        except Exception as e:  # noqa: BLE001
            return {}, [], _status(e)

    def alignment(self, image_encoder=None, text_encoder=None, n_perm=20):
        """Mutual k-NN and CKA of the encoder pair against the permutation null.

        Returns
        -------
        (rows, figure, scaling_plot, summary, status)
            ``rows``: ``[[metric, score, null mean, null std, z], ...]``; ``figure``: a matplotlib Figure
            of the scores against the null; ``scaling_plot``: a PNG path or None; ``summary``: one line.
        """
        try:
            n_perm = max(1, min(200, int(n_perm)))
            key = (image_encoder or self.default_pair[0], text_encoder or self.default_pair[1], n_perm)
            rep = self._reports.get(key)
            if rep is None:
                pipe, lock = self.pipeline(image_encoder, text_encoder)
                with lock:
                    rep = self._reports[key] = pipe.alignment_report(n_perm=n_perm)
            rows = []
            for name, m in rep.get("metrics", {}).items():
                std = float(m.get("null_std") or 0.0)
                # a null with no spread has no z (None, not NaN: NaN is not JSON)
                z = round((float(m["score"]) - float(m["null_mean"])) / std, 1) if std > 0 else None
                rows.append([name, round(float(m["score"]), 4), round(float(m["null_mean"]), 4),
                             round(std, 4), z])
            plot = rep.get("scaling_plot")
            plot = str(plot) if plot and Path(plot).is_file() else None
            summary = (f"{rep.get('image_encoder', key[0])} vs {rep.get('text_encoder', key[1])}: "
                       f"{rep.get('n_pairs', '?')} image-caption pairs, {n_perm} permutations"
                       + ("" if plot else "; no scaling-law runs yet (`python -m eval scaling`)"))
            return rows, null_figure(rows), plot, summary, ""
        except Exception as e:  # noqa: BLE001
            return [], None, None, "", _status(e)


def _accepts(fn, name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (optional features of a pipeline)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _status(e: BaseException) -> str:
    """One line for the page. Our own errors say what to do; anything else is logged with its traceback
    (for whoever runs the server) and shown by type and message only."""
    if isinstance(e, CaptionerError):
        return str(e)
    log.exception("demo handler failed")
    msg = str(e).splitlines()[0][:300] if str(e) else ""
    return f"internal error ({type(e).__name__}{': ' + msg if msg else ''}); the server is still running"


def null_figure(rows: list[list]):
    """A small figure: for each metric, the null mean +- 2 std as a grey bar and the score as a dot.

    ``rows`` as returned by :meth:`DemoHandlers.alignment`. Built on ``matplotlib.figure.Figure`` (not
    pyplot), so concurrent requests share no global state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 0.9 + 0.6 * max(1, len(rows))), dpi=100)
    ax = fig.add_subplot()
    for i, (name, score, mean, std, _z) in enumerate(rows):
        ax.barh(i, 4 * std, left=mean - 2 * std, height=0.5, color="#bbbbbb",
                label="null mean ± 2 std" if i == 0 else None)
        ax.plot([mean, mean], [i - 0.25, i + 0.25], color="#666666")
        ax.plot(score, i, "o", color="#d62728", label="score" if i == 0 else None)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.set_xlabel("alignment")
    ax.set_ylim(len(rows) - 0.4, -0.6)  # first metric on top, as in the table
    if rows:
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------------

def _warn_if(status: str):
    """Show a non-empty status as a toast as well as in the status box (HTML-escaped: the toast renders
    HTML and the message may quote a file name)."""
    if status:
        import gradio as gr

        gr.Warning(html.escape(status), duration=8)


def build_app(pipeline, factory: Callable[[str, str], Any] | None = None, warmup: bool = True,
              concurrency_limit: int = DEFAULT_CONCURRENCY, examples: list[str] | None = None,
              torch_threads: int | None = SERVING_TORCH_THREADS):
    """Long: a Gradio layout reads top to bottom, each component next to its wiring; cut into pieces it
    would scatter the page over functions that only make sense together.

    Build the demo around ``pipeline`` (loaded once, warmed up here unless ``warmup=False``).

    Parameters
    ----------
    pipeline
        The default pipeline (``Pipeline.default()``, or a fake with the same methods in tests).
    factory
        ``factory(image_encoder, text_encoder)`` for other encoder pairs (see :class:`DemoHandlers`).
    concurrency_limit
        Queue workers per event; the pipeline itself serves one request at a time.
    examples
        Example image paths (default: :func:`example_images`).
    torch_threads
        Threads after warm-up, for torch when it is loaded and for numpy's BLAS (None: leave them; see
        :func:`set_serving_threads`).

    Returns
    -------
    gr.Blocks
        Queued; ``app.handlers`` is the :class:`DemoHandlers` behind it.
    """
    import gradio as gr

    if warmup:
        pipeline.warmup()
    h = DemoHandlers(pipeline, factory, notify=lambda msg: gr.Info(html.escape(msg), duration=15))
    if warmup and h.classifier is not None and hasattr(h.classifier, "warmup"):
        h.classifier.warmup()
    examples = example_images() if examples is None else examples
    sets = label_sets()
    first_set = next(iter(sets))

    def caption_ui(image, rotation, img_enc, txt_enc, top_k, decode, captioner):
        out = h.caption(image, rotation, img_enc, txt_enc, top_k, decode, captioner)
        _warn_if(out[-1])
        return out

    def classify_ui(image, labels_text, rotation, img_enc, txt_enc):
        out = h.classify(image, labels_text, rotation, img_enc, txt_enc, top_k=5)
        _warn_if(out[-1])
        return out

    def alignment_ui(img_enc, txt_enc, n_perm):
        out = h.alignment(img_enc, txt_enc, n_perm)
        _warn_if(out[-1])
        rows, fig, plot, summary, status = out
        return rows, fig, gr.update(value=plot, visible=plot is not None), summary, status

    if warmup:  # the default label set's prompts are embedded once now, not on the first click
        from PIL import Image

        status = h.classify(Image.new("RGB", (32, 32), (255, 255, 255)), "\n".join(sets[first_set]))[-1]
        if status:
            log.warning("zero-shot warm-up: %s", status)

    def pick_label_set(name):
        return "\n".join(sets.get(name, []))

    with gr.Blocks(title="Pair-free captioner", analytics_enabled=False) as app:
        gr.Markdown("## Pair-free cross-modal captioner\nSeparately trained image and text encoders, aligned "
                    "by one rotation: fitted on pairs (Procrustes) or with no pairs at all (pair-free matcher).")
        with gr.Row():
            img_enc = gr.Dropdown(h.image_choices, value=h.default_pair[0], label="Image encoder",
                                  elem_id="image-encoder")
            txt_enc = gr.Dropdown(h.text_choices, value=h.default_pair[1], label="Text encoder",
                                  elem_id="text-encoder")
            from captioner.rotations import label as rotation_label
            rotation = gr.Radio([(rotation_label(r), r) for r in h.rotations], value=h.default_rotation,
                                label="Rotation", elem_id="rotation")

        with gr.Tab("Caption", id="caption-tab"):
            with gr.Row():
                with gr.Column():
                    cap_image = gr.Image(type="filepath", sources=["upload"], label="Image",
                                         elem_id="caption-image", height=320)
                    captioner = gr.Radio([(CAPTIONERS[c].label, c) for c in h.captioners], value=h.default_captioner,
                                         label="Captioner", elem_id="captioner")
                    with gr.Row():
                        top_k = gr.Slider(1, MAX_TOP_K, value=5, step=1, label="Retrieved captions (top-k)")
                        decode = gr.Checkbox(value=True, label="Decode a caption (else: the best retrieved one)",
                                             interactive=get_captioner(h.default_captioner).decode)
                    # the classifier names the photo itself, retrieval decodes nothing: the box is the decoder's
                    captioner.change(lambda c: gr.update(interactive=get_captioner(c).decode), captioner, decode,
                                     api_name=False, queue=False)
                    cap_btn = gr.Button("Caption", variant="primary", elem_id="caption-btn")
                with gr.Column():
                    cap_status = gr.Markdown(elem_id="caption-status")
                    cap_out = gr.Textbox(label="Caption", interactive=False, elem_id="caption-out")
                    cap_table = gr.Dataframe(headers=["rank", "retrieved caption", "score"],
                                             datatype=["number", "str", "number"], interactive=False,
                                             label="Retrieved captions", elem_id="caption-table", wrap=True)
                    cap_time = gr.Markdown(elem_id="caption-timings")
            if examples:
                gr.Examples(examples, inputs=[cap_image], label="Examples (sample photos and Tux Paint stamps)",
                            examples_per_page=12, elem_id="caption-examples")
            cap_btn.click(caption_ui, [cap_image, rotation, img_enc, txt_enc, top_k, decode, captioner],
                          [cap_out, cap_table, cap_time, cap_status], api_name="caption", preprocess=False)

        with gr.Tab("Zero-shot", id="zeroshot-tab"):
            with gr.Row():
                with gr.Column():
                    zs_image = gr.Image(type="filepath", sources=["upload"], label="Image",
                                        elem_id="zeroshot-image", height=320)
                    zs_set = gr.Dropdown(list(sets), value=first_set, label="Label set", elem_id="label-set")
                    zs_labels = gr.Textbox(value=pick_label_set(first_set), lines=8, max_lines=16,
                                           label="Labels (one per line or comma separated)",
                                           elem_id="labels")
                    zs_btn = gr.Button("Classify", variant="primary", elem_id="classify-btn")
                with gr.Column():
                    zs_status = gr.Markdown(elem_id="classify-status")
                    zs_label = gr.Label(num_top_classes=5, label="Top-5 probabilities", elem_id="classify-out")
                    zs_table = gr.Dataframe(headers=["label", "probability"], datatype=["str", "number"],
                                            interactive=False, label="Top-5", elem_id="classify-table")
            if examples:
                gr.Examples(examples, inputs=[zs_image], label="Examples", examples_per_page=12,
                            elem_id="zeroshot-examples")
            zs_set.change(pick_label_set, zs_set, zs_labels, api_name=False, queue=False)
            zs_btn.click(classify_ui, [zs_image, zs_labels, rotation, img_enc, txt_enc],
                         [zs_label, zs_table, zs_status], api_name="classify", preprocess=False)

        with gr.Tab("Alignment", id="alignment-tab"):
            gr.Markdown("How close the two embedding spaces are before any rotation: mutual k-NN and CKA of "
                        "paired image and caption embeddings, against a null where the pairing is shuffled.")
            with gr.Row():
                n_perm = gr.Slider(5, 200, value=20, step=5, label="Permutations for the null")
                al_btn = gr.Button("Measure alignment", variant="primary", elem_id="alignment-btn")
            al_status = gr.Markdown(elem_id="alignment-status")
            al_summary = gr.Markdown(elem_id="alignment-summary")
            with gr.Row():
                al_table = gr.Dataframe(headers=["metric", "score", "null mean", "null std", "z"],
                                        datatype=["str", "number", "number", "number", "number"],
                                        interactive=False, label="Against the permutation null",
                                        elem_id="alignment-table")
                al_plot = gr.Plot(label="Score vs null", elem_id="alignment-plot")
            al_scaling = gr.Image(label="Scaling law (alignment vs training)", visible=False, interactive=False,
                                  elem_id="scaling-plot")
            al_btn.click(alignment_ui, [img_enc, txt_enc, n_perm],
                         [al_table, al_plot, al_scaling, al_summary, al_status], api_name="alignment",
                         preprocess=False)

        from captioner.world.demo import world_tab

        world_tab(gr)

    set_serving_threads(torch_threads)
    app.queue(default_concurrency_limit=concurrency_limit, max_size=QUEUE_MAX_SIZE)
    app.handlers = h
    app.examples = examples
    return app


def launch(app, host: str = "127.0.0.1", port: int | None = 7860, block: bool = True, quiet: bool = False):
    """Serve ``app`` on ``host:port`` (loopback by default; no share link, no SSR, uploads capped at
    :data:`MAX_UPLOAD`). With ``block=False`` it returns at once (tests: call ``app.close()``)."""
    from captioner.paths import home

    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving the demo on %s: anyone who can reach this address can use it", host)
    app.launch(server_name=host, server_port=port, share=False, inbrowser=False, prevent_thread_lock=not block,
               show_error=False, max_file_size=MAX_UPLOAD, ssr_mode=False, quiet=quiet, pwa=False,
               footer_links=["api", "settings"],  # the "built with Gradio" link is the one that leaves the machine
               allowed_paths=[str(home() / "sample-photos")] + ([str(TUXPAINT_STAMPS)] if TUXPAINT_STAMPS.is_dir()
                                                                 else []))
    return app
