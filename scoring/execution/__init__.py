"""Running a repository's tests: environments per (repo, version) built from swebench's specs
(``envs``, ``specs``, ``docker``), what a run executes and reports (``testenv``), the loop's own
test signal before and after a patch (``tests``), which existing tests a patch exercises
(``selection``), and whether a patch applies as the harness applies it (``harness``).

Imports the floor and the rest of ``scoring``.
"""
