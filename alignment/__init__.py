"""Pure math for aligning two embedding spaces (numpy / torch in and out; imports nothing from captioner).

Modules: ``procrustes`` (paired rotations, ridge and random maps, saved with their metadata), ``pairfree``
(matchers that need no pairs), ``qap`` (class-level quadratic assignment), ``metrics`` (PRH alignment
metrics, permutation null, retrieval recall), ``errors``; the synthetic benchmark is ``eval.matcher_bench``.
"""
