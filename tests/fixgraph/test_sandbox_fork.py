"""A sandboxed run started while another thread imports a module that logs: both go on.

The scenario runs in a child Python of its own, so that the deadlock it guards against ends in
the child's timeout instead of a hung test worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCENARIO = r"""
import logging, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from fixgraph.sandbox.process import Limits, run_isolated, scrubbed_env

run = Path(sys.argv[2])


class SlowFinder:
    # A meta path finder runs under the interpreter's import lock; this one then asks logging for
    # a logger, as setuptools' distutils finder does (pkg_resources) when the static phase's
    # importlib.util.find_spec first meets it.
    def find_spec(self, name, path=None, target=None):
        if name == "slow_logging_mod":
            time.sleep(1.5)
            logging.getLogger("slow_logging_mod")
        return None


sys.meta_path.insert(0, SlowFinder())
import importlib.util
importer = threading.Thread(target=importlib.util.find_spec, args=("slow_logging_mod",), daemon=True)
importer.start()
time.sleep(0.3)  # the import is under way
(run / "repo").mkdir()
done = run_isolated([sys.executable, "-I", "-c", "print('ran')"], run / "repo", scrubbed_env(run / "home"),
                    Limits(30, 30, 1024))
importer.join(30)
print(done.returncode, done.output.strip().splitlines()[-1:], importer.is_alive())
"""


def test_a_run_started_while_another_thread_imports_a_module_that_logs_does_not_hang(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", SCENARIO, str(root), str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "0 ['ran'] False", proc.stdout + proc.stderr[-2000:]


def test_the_run_gets_its_cpu_address_space_and_core_limits(tmp_path: Path) -> None:
    from fixgraph.sandbox.process import Limits, run_isolated, scrubbed_env

    (tmp_path / "repo").mkdir()
    probe = ("import resource as r; print(r.getrlimit(r.RLIMIT_CPU), r.getrlimit(r.RLIMIT_AS), "
             "r.getrlimit(r.RLIMIT_CORE))")
    done = run_isolated([sys.executable, "-I", "-c", probe], tmp_path / "repo", scrubbed_env(tmp_path / "home"),
                        Limits(30, 17, 2048))
    mem = 2048 * 1024 * 1024
    assert done.output.strip().splitlines()[-1] == f"(17, 22) ({mem}, {mem}) (0, 0)", done.output
