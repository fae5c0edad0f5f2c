"""How many Lite FAIL_TO_PASS / PASS_TO_PASS tests the image-test rule sets aside on our builds.

    python -m eval.image_test_count --dataset ../shared/data/swebench_lite.jsonl --repos DIR [--backend venv]

Reads each instance's test files at its base commit with its test_patch applied (no build, no
run) and applies :func:`scoring.execution.image_tests.unmatched_tests`. Prints per version the
instances, their FAIL_TO_PASS and PASS_TO_PASS counts and how many of each are set aside, and the
instances left with no runnable FAIL_TO_PASS test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from eval.options import add_options, check_options, load_instances
from fixgraph.repo import gitsafe
from fixgraph.repo.workspace import find_mirror
from scoring.execution.image_tests import UNMATCHED_IMAGE_TESTS, unmatched_tests
from scoring.execution.outcomes import test_file_reader
from scoring.verdict.judge import InputError


def _checkout_files(mirror: Path, commit: str, files: set[str], dest: Path) -> None:
    for rel in files:
        proc = subprocess.run(["git", "-C", str(mirror), "show", f"{commit}:{rel}"], capture_output=True,
                              env=gitsafe.hardened_env(), timeout=60)
        if proc.returncode == 0:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.image_test_count", description=(__doc__ or "").split("\n\n")[0])
    add_options(ap, without={"only", "stride", "shard", "output", "resume"})
    ap.add_argument("--backend", default="venv")
    args = ap.parse_args(argv)
    try:
        check_options(args)
        instances = [i for i in load_instances(args) if i.repo in UNMATCHED_IMAGE_TESTS]
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    lost: list[str] = []
    for inst in instances:
        mirror = find_mirror(args.repos, inst.repo)
        if mirror is None:
            print(f"error: no mirror of {inst.repo} under {args.repos}", file=sys.stderr)
            return 2
        ids = [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS]
        files = {t.split("::", 1)[0] for t in ids if "::" in t}
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as tmp:
            _checkout_files(mirror, inst.base_commit, files, Path(root))
            read = test_file_reader(Path(root), inst.test_patch, Path(tmp))
            unmatched = unmatched_tests(inst.repo, args.backend, ids, read)
        row = rows[(inst.repo, inst.version)]
        f2p_out = sum(t in unmatched for t in inst.FAIL_TO_PASS)
        row[0] += 1
        row[1] += len(inst.FAIL_TO_PASS)
        row[2] += f2p_out
        row[3] += len(inst.PASS_TO_PASS)
        row[4] += sum(t in unmatched for t in inst.PASS_TO_PASS)
        if f2p_out == len(inst.FAIL_TO_PASS):
            lost.append(inst.instance_id)
    print("repo                    version  insts  F2P  F2P_set_aside  P2P  P2P_set_aside")
    total = [0, 0, 0, 0, 0]
    for (repo, version), r in sorted(rows.items()):
        print(f"{repo:<23} {version:<7} {r[0]:>6} {r[1]:>4} {r[2]:>14} {r[3]:>4} {r[4]:>14}")
        total = [a + b for a, b in zip(total, r, strict=True)]
    print(f"{'total':<31} {total[0]:>6} {total[1]:>4} {total[2]:>14} {total[3]:>4} {total[4]:>14}")
    print(f"instances with no runnable FAIL_TO_PASS test here: {len(lost)}: {', '.join(lost) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
