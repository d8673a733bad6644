"""Errors raised by the alignment library.

``alignment`` is pure math and imports nothing from ``captioner``; the captioner layer translates these into
its own one-line user errors (``AlignmentError`` -> ``CaptionerError``, ``MismatchError`` ->
``CacheMismatchError``).
"""
from __future__ import annotations


class AlignmentError(ValueError):
    """Bad input to an alignment routine: wrong shape, NaN/inf rows, too few rows, degenerate data."""


class MismatchError(AlignmentError):
    """A saved map was fitted for another encoder or dimension than the one it is being used with."""
