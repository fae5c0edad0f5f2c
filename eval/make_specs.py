"""Write scoring/execution/data/swebench_specs.json: swebench 4.1.0's install specs for the SWE-bench repos.

swebench 5 no longer ships ``MAP_REPO_VERSION_TO_SPECS`` (each dataset row carries its own
``eval_script`` instead, and the Lite JSONL has none), so the project ships the table it needs.
Run once, by hand, from a downloaded wheel; a run never touches a package index:

    pip download --no-deps swebench==4.1.0 -d /tmp/sb
    python -m eval.make_specs /tmp/sb/swebench-4.1.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import runpy
import sys
import tempfile
import zipfile
from pathlib import Path

MEMBER = "swebench/harness/constants/python.py"
# The twelve repositories of SWE-bench (and Lite); the wheel also lists SWE-bench-extra repos.
REPOS = ("astropy/astropy", "django/django", "matplotlib/matplotlib", "mwaskom/seaborn", "pallets/flask",
         "psf/requests", "pydata/xarray", "pylint-dev/pylint", "pytest-dev/pytest",
         "scikit-learn/scikit-learn", "sphinx-doc/sphinx", "sympy/sympy")
OUT = Path(__file__).resolve().parent.parent / "scoring" / "execution" / "data" / "swebench_specs.json"


def build(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read(MEMBER)
    with tempfile.TemporaryDirectory() as tmp:
        module = Path(tmp) / "python.py"
        module.write_bytes(source)
        data = runpy.run_path(str(module))
    specs = data["MAP_REPO_VERSION_TO_SPECS_PY"]
    reqs = data.get("MAP_REPO_TO_REQS_PATHS", {})
    return {
        "provenance": (f"{wheel.name}:{MEMBER} (sha256 of that file "
                       f"{hashlib.sha256(source).hexdigest()}), MAP_REPO_VERSION_TO_SPECS_PY and "
                       "MAP_REPO_TO_REQS_PATHS restricted to the SWE-bench repos; written by "
                       "python -m eval.make_specs"),
        "specs": {r: specs[r] for r in REPOS if r in specs},
        "reqs_paths": {r: reqs[r] for r in REPOS if r in reqs},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.make_specs", description="Write the shipped swebench specs table.")
    p.add_argument("wheel", type=Path, help="swebench-4.1.0-py3-none-any.whl")
    p.add_argument("-o", "--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not args.wheel.is_file():
        print(f"make_specs: error: {args.wheel} is not a file", file=sys.stderr)
        return 2
    table = build(args.wheel)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {sum(len(v) for v in table['specs'].values())} specs, {len(table['specs'])} repos")
    return 0


if __name__ == "__main__":
    sys.exit(main())
