"""The product's own evaluation: COCO caption metrics (``coco``) and zero-shot accuracy (``zeroshot``), what
``captioner eval coco|zeroshot`` run. The experiments (``eval/``) build their tables on top of these."""
