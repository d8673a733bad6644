# The two set-up commands of README: `make eval` (main job on the embedded default) and `make test`.
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export GRADIO_ANALYTICS_ENABLED := False
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-dev eval test test-fast demo bench report lint clean

setup:
	bash scripts/setup.sh

setup-dev:
	bash scripts/setup.sh --dev

# Main job: caption the embedded Tux Paint test split with paired and pair-free rotations, score it with
# pycocoevalcap, and classify zero-shot (each run writes its metrics.json; eval.summary prints them as one table
# at the end); build what `make demo` loads (both rotations and the text-only decoder: minutes the first time),
# so the demo starts in seconds; embed the default caption bank (what the first `captioner caption` needs) and
# score the captioners on the GCompris / openclipart validation photos.
eval: setup
	$(PY) -m captioner eval coco --rotation paired >/dev/null
	$(PY) -m captioner eval coco --rotation pairfree >/dev/null
	$(PY) -m captioner eval coco --rotation head >/dev/null
	$(PY) -m captioner eval zeroshot --dataset tuxpaint --mode paired >/dev/null
	$(PY) -m captioner eval zeroshot --dataset tuxpaint --mode pairfree >/dev/null
	$(PY) -m captioner eval zeroshot --dataset tuxpaint --mode head >/dev/null
	$(PY) -c "from captioner.pipeline import Pipeline; Pipeline().warmup()"  # what the demo's first start needs
	$(PY) -m eval.photos_val --out $${CAPTIONER_HOME:-$$HOME/.cache/captioner}/runs/photos-val.json
	$(PY) -m eval.summary

# The whole test suite, slow (real models, training) and browser tests included.
test: setup-dev
	$(PY) -m pytest -q -p no:cacheprovider --timeout=900

test-fast: setup-dev
	$(PY) -m pytest -q -m "not slow and not browser" --timeout=300

demo: setup
	$(PY) app.py

report: setup
	$(PY) -m captioner report

bench: setup
	$(PY) bench/encode_throughput.py
	$(PY) -m captioner align bench --json

lint: setup-dev
	.venv/bin/ruff check captioner alignment eval tests app.py

clean:
	rm -rf .venv
