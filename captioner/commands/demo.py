"""``captioner demo``: serve the Gradio demo on 127.0.0.1."""
from __future__ import annotations

import click


@click.command("demo")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on. Anything but loopback exposes the demo to the network.")
@click.option("--port", default=7860, show_default=True, type=click.IntRange(1, 65535))
@click.option("--image-encoder", default="efficientnet-lite0", show_default=True,
              help="Image encoder of the default pipeline (see `captioner encoders`).")
@click.option("--text-encoder", default="minilm-l6", show_default=True, help="Text encoder of the default pipeline.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, mps ...")
@click.option("--concurrency", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Queue workers per event (the pipeline still serves one request at a time).")
def cli(host, port, image_encoder, text_encoder, device, concurrency):
    """Start the Gradio demo: caption an image, classify it zero-shot, and measure how well the two
    encoders align. Models load once and warm up before the page opens; works offline."""
    from captioner.demo import build_app, launch
    from captioner.pipeline import Pipeline

    click.echo(f"loading {image_encoder} + {text_encoder} on {device} and warming up ...", err=True)
    pipe = Pipeline.default(image_encoder=image_encoder, text_encoder=text_encoder, device=device)
    app = build_app(pipe, concurrency_limit=concurrency)
    click.echo(f"serving on http://{host}:{port}/ (Ctrl-C to stop)", err=True)
    launch(app, host=host, port=port, block=True)
