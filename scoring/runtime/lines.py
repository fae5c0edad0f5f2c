"""Lines a test run executed in the files a finding points at (``line_trace_site.py``, installed
as the test process's ``sitecustomize``), and where exceptions passed through them.

:class:`Lines` is what one or several runs saw; the Critic weighs its static suspicions against
it (``scoring.verdict.weigh``). A run whose processes wrote nothing (killed by the timeout, or a
runner that replaced the tracer, as ``pytest --cov`` does) leaves the files unknown, not unexecuted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SITE_SOURCE = Path(__file__).with_name("line_trace_site.py")
MAX_FILES = 20


@dataclass
class Lines:
    """``executed``: file -> lines run (in the code objects that hold a wanted line); ``imported``:
    the watched files some code of which ran; ``raised``: file -> line -> exception types seen passing
    there (raised or propagated, caught later or not); ``traced``: the files watched by a run that
    wrote its record; ``timed_out``: some traced run was cut by its timeout."""

    executed: dict[str, set[int]] = field(default_factory=dict)
    imported: set[str] = field(default_factory=set)
    raised: dict[str, dict[int, set[str]]] = field(default_factory=dict)
    traced: set[str] = field(default_factory=set)
    timed_out: bool = False

    def merge(self, other: Lines) -> None:
        for f, lines in other.executed.items():
            self.executed.setdefault(f, set()).update(lines)
        for f, by_line in other.raised.items():
            mine = self.raised.setdefault(f, {})
            for n, types in by_line.items():
                mine.setdefault(n, set()).update(types)
        self.imported |= other.imported
        self.traced |= other.traced
        self.timed_out = self.timed_out or other.timed_out

    def to_dict(self) -> dict[str, Any]:
        return {"executed": {f: sorted(v) for f, v in self.executed.items()},
                "raised": {f: {str(n): sorted(t) for n, t in v.items()} for f, v in self.raised.items()},
                "imported": sorted(self.imported), "traced": sorted(self.traced), "timed_out": self.timed_out}


def install(dest_dir: Path) -> Path:
    """Lay the tracer in ``dest_dir`` as ``sitecustomize.py`` (to be put first on PYTHONPATH)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    (dest_dir / "sitecustomize.py").write_text(SITE_SOURCE.read_text())
    return dest_dir


def spec(file: str, lines: Iterable[int] = ()) -> str:
    """One watched file as the tracer reads it: ``path#line,line`` (no lines: the whole file)."""
    nums = sorted({int(n) for n in lines if n})
    return file + ("#" + ",".join(map(str, nums)) if nums else "")


def file_of(entry: str) -> str:
    return entry.partition("#")[0]


def env_for(files: Iterable[str], out_dir: Path) -> dict[str, str]:
    """The variables that make the tracer watch ``files`` (:func:`spec` entries) and write under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {"FIXGRAPH_TRACE_FILES": os.pathsep.join(list(files)[:MAX_FILES]), "FIXGRAPH_TRACE_DIR": str(out_dir)}


def read(out_dir: Path, files: Iterable[str], timed_out: bool) -> Lines:
    """What the processes of one run wrote under ``out_dir``; nothing traced when none wrote."""
    got = Lines(timed_out=timed_out)
    wrote = False
    for path in sorted(out_dir.glob("lines-*.json")) if out_dir.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            one = Lines(executed={str(f): {int(n) for n in v} for f, v in data.get("executed", {}).items()},
                        imported={str(f) for f in data.get("imported", [])},
                        raised={str(f): {int(n): {str(t) for t in ts} for n, ts in v.items()}
                                for f, v in data.get("raised", {}).items()})
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        wrote = True
        got.merge(one)
    if wrote:
        got.traced = {file_of(f) for f in files}
    return got
