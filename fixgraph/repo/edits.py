"""Apply the Coder's search/replace edits to a worktree."""

from __future__ import annotations

from collections.abc import Sequence

from fixgraph.repo.workspace import PatchError, Worktree
from fixgraph.state import Edit


def _locate(content: str, search: str) -> tuple[int, int]:
    """Where ``search`` occurs once in ``content``; tolerant only of trailing whitespace per line."""
    count = content.count(search)
    if count == 1:
        start = content.index(search)
        return start, start + len(search)
    if count > 1:
        raise PatchError(f"search text occurs {count} times; include more context to make it unique")
    # LLMs often drop or add trailing spaces; match line by line with them stripped.
    want = [ln.rstrip() for ln in search.strip("\n").split("\n")]
    lines = content.split("\n")
    hits = [i for i in range(len(lines) - len(want) + 1)
            if [ln.rstrip() for ln in lines[i:i + len(want)]] == want]
    if len(hits) != 1:
        raise PatchError("search text not found in the file" if not hits else
                         f"search text occurs {len(hits)} times; include more context")
    start = sum(len(ln) + 1 for ln in lines[:hits[0]])
    end = start + sum(len(ln) + 1 for ln in lines[hits[0]:hits[0] + len(want)]) - 1
    return start, end


def apply_edits(wt: Worktree, edits: Sequence[Edit]) -> list[str]:
    """Apply every edit or none; return the touched paths. Raises PatchError with the reason."""
    if not edits:
        raise PatchError("the change has no edits")
    pending: dict[str, str] = {}
    for n, edit in enumerate(edits, 1):
        target = wt.resolve(edit.path)
        if target.is_symlink():
            raise PatchError(f"edit {n}: {edit.path} is a symbolic link")
        current = pending.get(edit.path)
        if current is None and target.is_file():
            current = target.read_text(encoding="utf-8", errors="surrogateescape")
        if not edit.search:
            if current is not None and current.strip():
                raise PatchError(f"edit {n}: {edit.path} exists; an empty search only creates new files")
            pending[edit.path] = edit.replace
            continue
        if current is None:
            raise PatchError(f"edit {n}: {edit.path} does not exist")
        try:
            start, end = _locate(current, edit.search)
        except PatchError as exc:
            raise PatchError(f"edit {n} in {edit.path}: {exc}") from None
        pending[edit.path] = current[:start] + edit.replace + current[end:]
    for rel, text in pending.items():
        target = wt.resolve(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", errors="surrogateescape")
    return list(pending)
