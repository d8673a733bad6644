"""The Gradio demo on the embedded default pipeline, served on 127.0.0.1:7860 (``python app.py``).

The same as ``captioner demo``; the app itself is built in ``captioner/demo.py``."""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

if __name__ == "__main__":
    from captioner.demo import build_app, launch
    from captioner.pipeline import Pipeline

    launch(build_app(Pipeline.default()), host="127.0.0.1", port=7860)
