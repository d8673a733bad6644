"""The JEPA world's chain, measured: JEPAs trained apart -> one rotation (paired, or found with no pair) ->
captions and zero-shot labels -> official metrics (``python -m eval world report``).

Modules: ``setting`` (the world's data for one seed: the splits, the unpaired sets, prompts), ``chain``
(one seed's rows: every text encoder x every rotation), ``table`` (seeds aggregated, Markdown, targets).
"""
