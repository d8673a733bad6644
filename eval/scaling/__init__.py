"""The alignment scaling law of the scene lab (``python -m eval scaling``).

Modules: ``config`` (ScalingConfig, presets, methods), ``laws`` (the power and logistic laws, their fits,
held-out predictions and sample ratios: pure functions), ``runs`` (training and measuring each run,
``run_scaling``), ``queue`` (the pid-file claims that share runs among workers), ``plot``, ``report``.
"""
