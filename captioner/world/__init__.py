"""The JEPA world: generated scenes (one disc, five attributes), their renders and captions
(``scenes``: a library that imports nothing from training or experiments)."""
