"""Pure math for aligning two embedding spaces (numpy / torch in and out; imports nothing from captioner).

The public names live here, POT-style (``ot.emd``, ``ot.da``): ``from alignment import match,
fit_procrustes, foscttm``, or a submodule, ``alignment.metrics.cka``. Both are imported on first use, so
``import alignment`` costs nothing until a name is read.

Submodules
----------
procrustes : paired maps: orthogonal Procrustes, ridge, a Haar-random rotation (``fit_procrustes`` ...)
maps : the fitted maps (``Rotation``, ``RidgeMap``, ``LinearMap``), saved with the encoders' fingerprints
pairfree : pair-free matchers by name (``match``, ``MATCHERS``); one matcher per module beside it
    (``starts``, ``rosetta``, ``anneal``, ``csls``, ``lattice``, ``pairfree_baselines``)
matching : what the matchers share (``MatchResult``, ``prepare``, ``rotation_from``, ``weighted_procrustes``)
metrics : PRH alignment metrics by name (``score``, ``METRICS``), ``permutation_null``, ``foscttm``, recall
qap : class-level quadratic assignment (``match_classes``)
pseudo : a rotation from a classifier head's soft pseudo-pairs (``fit_head_rotation``)
errors : ``AlignmentError`` (bad input, one line) and ``MismatchError`` (a map loaded for other encoders)

Adding a matcher: a function ``match_x(X, Y, **kw) -> MatchResult`` in a module of its own, one entry in
``alignment.pairfree.MATCHERS`` (or ``register_matcher("x", match_x, "one line")``), and a test.

Example
-------
>>> import numpy as np, alignment
>>> X = np.random.default_rng(0).standard_normal((200, 8))
>>> R = alignment.random_orthogonal(8, seed=1)
>>> rot = alignment.fit_procrustes(X, X @ R, center=False)
>>> bool(np.abs(rot.transform(X) - X @ R).max() < 1e-5), alignment.foscttm(rot.transform(X), X @ R)
(True, 0.0)
"""
from __future__ import annotations

import importlib

# public name -> the submodule that defines it (imported on first use)
_EXPORTS = {
    **dict.fromkeys(("match", "match_pairfree", "MATCHERS", "MATCHER_VERSION"), "pairfree"),
    **dict.fromkeys(("MatchResult", "check_seeds"), "matching"),
    **dict.fromkeys(("fit_procrustes", "fit_ridge", "fit_random", "orthogonal_procrustes", "random_orthogonal",
                     "pca"), "procrustes"),
    **dict.fromkeys(("LinearMap", "Rotation", "RidgeMap", "HeadQueryMap", "load_map"), "maps"),
    **dict.fromkeys(("score", "METRICS", "permutation_null", "foscttm", "recall_at_k", "mutual_knn", "cka",
                     "unbiased_cka", "cknna", "svcca"), "metrics"),
    "match_classes": "qap",
    "fit_head_rotation": "pseudo",
    **dict.fromkeys(("AlignmentError", "MismatchError"), "errors"),
    "match_multistart": "starts",
    "match_rosetta": "rosetta",
    "match_annealed": "anneal",
    "match_csls": "csls",
    "match_lattice": "lattice",
    **dict.fromkeys(("match_wp", "match_gw"), "pairfree_baselines"),
}
_SUBMODULES = ("anneal", "csls", "diagnose", "errors", "lattice", "lattice_fit", "maps", "matching", "metrics",
               "neighbours", "nnsearch", "pairfree", "pairfree_baselines", "procrustes", "pseudo", "qap", "rosetta",
               "seeds", "starts")


def register_matcher(name: str, fn, about: str, replace: bool = False) -> None:
    """Add a pair-free matcher to ``alignment.pairfree.MATCHERS``, so that ``match(X, Y, method=name)``,
    ``captioner align matchers`` and ``--matcher`` choices built from it see it.

    Parameters
    ----------
    name : the method name
    fn : ``fn(X (N1, D1), Y (N2, D2), **kw) -> MatchResult``
    about : one line for the CLI and the docs
    replace : allow replacing a registered matcher (else an ``AlignmentError``)
    """
    from alignment.errors import AlignmentError
    from alignment.pairfree import MATCHERS

    if name in MATCHERS and not replace:
        raise AlignmentError(f"matcher {name!r} is registered already; pass replace=True to replace it")
    MATCHERS[name] = (fn, about)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"alignment.{_EXPORTS[name]}"), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"alignment.{name}")
    else:
        raise AttributeError(f"module 'alignment' has no attribute {name!r}")
    globals()[name] = value  # once: later reads are plain attribute lookups
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES))


__all__ = sorted(_EXPORTS) + ["register_matcher"]
