"""Running fixgraph: the command line behind graph.py (``cli``), ``--check`` (``preflight``), one
graph invocation per task, checkpointed and recorded (``runner``), and Ray (``executors``).

The one part of ``fixgraph`` above the floor: it may import ``scoring`` and ``agents`` (it builds
the nodes' ``TaskContext``), never ``bot`` or ``eval``.
"""
