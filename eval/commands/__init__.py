"""Thin click drivers of ``python -m eval`` (one module per noun, registered lazily in ``eval/cli.py``)."""
