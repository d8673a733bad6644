# The two set-up commands of README: `make eval` (main job on the embedded default) and `make test`; `make report`
# and `make bench` run the experiments (python -m eval).
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

# Main job: caption the embedded Tux Paint test split with paired, pair-free and head rotations, score it with
# pycocoevalcap, and classify zero-shot (each run writes its metrics.json; eval.summary prints them as one table
# at the end); build the default caption bank (what the first `captioner caption` needs). Prints how long it
# took. What the demo loads (both rotations and the text-only decoder: minutes the first time) is built by
# `make demo`; the validation study on the GCompris / openclipart photos is an experiment: `make report`.
eval: setup
	@start=$$(date +%s); \
	$(PY) -m captioner eval coco --rotation paired >/dev/null && \
	$(PY) -m captioner eval coco --rotation pairfree >/dev/null && \
	$(PY) -m captioner eval coco --rotation head >/dev/null && \
	$(PY) -m captioner eval zeroshot --dataset tuxpaint --mode paired >/dev/null && \
	$(PY) -m captioner eval zeroshot --dataset tuxpaint --mode pairfree >/dev/null && \
	$(PY) -m captioner eval zeroshot --dataset tuxpaint --mode head >/dev/null && \
	$(PY) -c "from captioner.pipeline import Pipeline; from captioner.photocaption import ClassifierCaptioner; \
	ClassifierCaptioner(Pipeline).warmup()" && \
	$(PY) -m eval summary && \
	echo "make eval: $$(( $$(date +%s) - start )) s"

# The whole test suite, slow (real models, training) and browser tests included.
test: setup-dev
	$(PY) -m pytest -q -p no:cacheprovider --timeout=900

test-fast: setup-dev
	$(PY) -m pytest -q -m "not slow and not browser" --timeout=300

# The demo; the first time, build what it loads (both rotations and the text-only decoder) so it starts in seconds.
demo: setup
	$(PY) -c "from captioner.pipeline import Pipeline; Pipeline().warmup()"
	$(PY) app.py

# The experiments' report (python -m eval): the results table on Tux Paint test (every captioner x rotation,
# the text-only ceiling, zero-shot) and the validation study on the GCompris / openclipart photos.
report: setup
	$(PY) -m eval report
	$(PY) -m eval photos-val --out $${CAPTIONER_HOME:-$$HOME/.cache/captioner}/runs/photos-val.json

bench: setup
	$(PY) bench/encode_throughput.py
	$(PY) -m eval align bench --json

lint: setup-dev
	.venv/bin/ruff check captioner alignment eval tests app.py

clean:
	rm -rf .venv
