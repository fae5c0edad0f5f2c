"""Tests whose outcome depends on this machine's text rendering: not runnable here, never a verdict.

matplotlib's ``@image_comparison`` tests compare a rendering with baseline PNG/PDF/SVG files made
with the FreeType matplotlib bundles for its tests (2.6.1) and its own fonts. The venv builds link
Debian's FreeType (``scoring.execution.compiled``: nothing can be downloaded during the build), so
their glyphs differ and such a test may fail, or pass, for reasons that have nothing to do with a
patch. They are set aside, with the reason, and counted neither as passes nor as regressions.
``check_figures_equal`` tests render both figures with the same FreeType and stay runnable.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

# repo -> (the decorator that compares with baseline files, why such a test cannot match here)
UNMATCHED_IMAGE_TESTS: dict[str, tuple[str, str]] = {
    "matplotlib/matplotlib": (
        "image_comparison",
        "an image comparison with baseline files rendered with matplotlib's bundled FreeType 2.6.1; this "
        "build links Debian's FreeType (no download during the build), so its pixels cannot match here",
    ),
}
# Backends whose builds are this project's (Debian's FreeType); the harness's images match the baselines.
OWN_BUILD_BACKENDS = frozenset({"venv", "local"})


def decorated_tests(source: str, decorator: str) -> set[str]:
    """Names (``test_x``, ``TestK::test_x``) of the functions in ``source`` decorated with ``decorator``
    (called or not, by name or as an attribute)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    # Module-level aliases of the decorator count as it: matplotlib's test_mplot3d.py has
    # ``mpl3d_image_comparison = functools.partial(image_comparison, remove_text=True, ...)``.
    names = {decorator}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                (isinstance(n, ast.Name) and n.id == decorator) or (isinstance(n, ast.Attribute) and n.attr == decorator)
                for n in ast.walk(node.value)):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def marked(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in names:
                return True
        return False

    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and marked(node):
            out.add(node.name)
        elif isinstance(node, ast.ClassDef):
            out |= {f"{node.name}::{fn.name}" for fn in node.body
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and marked(fn)}
    return out


def unmatched_tests(repo: str, backend: str, test_ids: Iterable[str],
                    read: Callable[[str], str | None]) -> dict[str, str]:
    """Of ``test_ids`` (``path::name[param]``), those that cannot match here, with the reason;
    ``read(path)`` gives a test file's text as the run has it (None when absent)."""
    rule = UNMATCHED_IMAGE_TESTS.get(repo)
    if rule is None or backend not in OWN_BUILD_BACKENDS:
        return {}
    decorator, reason = rule
    by_file: dict[str, set[str]] = {}
    out: dict[str, str] = {}
    for test in test_ids:
        path, sep, rest = test.partition("::")
        if not sep:
            continue
        if path not in by_file:
            text = read(path)
            by_file[path] = decorated_tests(text, decorator) if text is not None else set()
        if rest.split("[", 1)[0] in by_file[path]:
            out[test] = reason
    return out
