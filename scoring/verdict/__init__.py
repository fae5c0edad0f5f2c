"""Verdicts: ``fix_score`` and its parts (``fix_score``, ``quality``, ``expected_change``), choosing
one patch among candidates (``select``), and judging any agent's predictions (``critic``).

Imports the floor and the rest of ``scoring``.
"""
