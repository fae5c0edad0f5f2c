"""The dashboard: one self-contained HTML page comparing configs run on the same tasks (``page``),
its charts (``charts``), paired statistics (``stats``) and the runs folder it reads (``rundata``).

``python -m eval.dashboard RUNS_DIR -o dashboard.html``.
"""
