"""Repositories on disk: cached bare clones and per-task worktrees (``workspace``), git that runs no
hook or config it was not told to (``gitsafe``), and the Coder's search/replace edits (``edits``).

Floor: imports only the rest of the floor (``sandbox`` to protect its caches from test processes).
"""
