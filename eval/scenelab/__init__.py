"""The scene lab: the experiment that checks "JEPAs with good views learn the same representation up to a
rotation" on the world of ``captioner.world.scenes``.

Modules: ``lab`` (LabConfig, ``run_lab``: trains the three encoders and scores them; ``captioner
scenelab``), ``measures`` (held-out residual, view subspace, mutual k-NN), ``optimum`` (the objective's
optimum over a lookup table), and the lab's diagnostics, each a ``python -m eval scenelab`` subcommand:
``diagnose`` (where a lab's residual comes from), ``anchor`` (a supervised image encoder to start from),
``objective`` (each regulariser's optimum with an unlimited encoder).
"""
