"""Running fixgraph: the command line behind graph.py (``cli``), ``--check`` (``preflight``), one
graph invocation per task, checkpointed and recorded (``tasks``), and Ray (``executors``).

Above ``agents`` (it builds the nodes' ``TaskContext``), below ``graph.py``: the graph factory is
handed in, never imported.
"""
