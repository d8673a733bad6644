"""One-off experiments behind figures in docs/results: each is ``python -m eval.experiments.<name>`` and
prints JSON and a table. They drive the library (captioner/, alignment/, eval/) and nothing imports them."""
