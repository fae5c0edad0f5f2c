"""The Docker backend: the official SWE-bench instance images, run with the docker CLI.

The image ``<namespace>/sweb.eval.x86_64.<instance id, "__" as "_1776_">:latest`` holds the repo
at ``/testbed`` with its conda env ``testbed`` installed. A run starts a throwaway container with
no network, the memory and CPU limits from config, applies the candidate patch, resets the test
files, writes the suite's reproduction tests, runs swebench's test command for the repo and
version on the suite's test files, and parses the output with swebench's log parsers. The run
without the patch is the same script without its first step.

When no Docker engine answers (``docker version`` fails), ``scoring.execution.runner.make_runner`` gives a
runner whose every run says so, and the Critic's fallback applies.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import Worktree
from scoring.execution import testenv
from scoring.execution.specs import SpecsError, parse_log, repo_specs, test_directives
from scoring.execution.testenv import Suite, SuiteRun, UnavailableRunner, run_root, suite_timeout

START, END = ">>>>> Start Test Output", ">>>>> End Test Output"


def engine_status() -> str:
    """"" when a Docker engine answers, else one line saying why not (asked once per process)."""
    return _engine_status(os.environ.get("PATH", ""), os.environ.get("DOCKER_HOST", ""))


@functools.cache
def _engine_status(_path: str, _host: str) -> str:
    try:
        proc = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return "no docker CLI on this machine"
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 20s"
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["docker version failed"])[-1]
        return f"no Docker engine answers ({msg[:200]})"
    return ""


def image_name(namespace: str, instance_id: str) -> str:
    return f"{namespace}/sweb.eval.x86_64.{instance_id.replace('__', '_1776_')}:latest".lower()


def eval_script(task: Task, spec: dict, suite: Suite, with_patch: bool) -> str:
    """The shell script a container runs: the patch, the base's tests back, the suite's added
    files and extra patch, then swebench's test command on the suite's targets."""
    lines = [
        "source /opt/miniconda3/bin/activate", "conda activate testbed", "cd /testbed",
        "git config --global --add safe.directory /testbed",
        *spec.get("eval_commands", []),
    ]
    if with_patch:
        lines += ["git apply --whitespace=nowarn /fixgraph/patch.diff || "
                  "patch --batch --fuzz=5 -p1 -i /fixgraph/patch.diff || exit 97"]
    for rel in suite.protected:
        q = shlex.quote(rel)
        lines += [f"git checkout {task.base_commit} -- {q} 2>/dev/null || rm -f {q}"]
    for n, (rel, _) in enumerate(suite.added):
        q = shlex.quote(rel)
        lines += [f"mkdir -p \"$(dirname {q})\" && cp /fixgraph/added/{n} {q}"]
    if suite.extra_patch.strip():
        lines += ["git apply --whitespace=nowarn /fixgraph/test.diff || exit 98"]
    directives = test_directives(task.repo, list(suite.targets))
    lines += [f": '{START}'", f"{spec['test_cmd']} {' '.join(map(shlex.quote, directives))}", f": '{END}'"]
    return "\n".join(lines) + "\n"


class DockerRunner:
    backend = "docker"

    def __init__(self, settings: TestSettings, cache_dir: Path):
        self.settings = settings
        self.cache_dir = cache_dir.resolve()

    def env_key(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> str:
        return "docker-" + image_name(self.settings.docker_namespace, task.instance_id)

    def run_suite(self, task: Task, wt: Worktree, patch: str | None, suite: Suite) -> SuiteRun:
        try:
            spec = repo_specs(self.cache_dir, task.repo, task.version)
        except SpecsError as exc:
            return SuiteRun({}, "", 0.0, error=str(exc), backend="docker")
        if spec is None:
            return SuiteRun({}, "", 0.0, error=f"swebench has no specs for {task.repo} version {task.version!r}",
                            backend="docker")
        work = run_root(self.settings.run_root) / f"docker-{uuid.uuid4().hex[:12]}"
        (work / "added").mkdir(parents=True)
        try:
            (work / "patch.diff").write_text(patch or "")
            (work / "test.diff").write_text(suite.extra_patch)
            for n, (_, content) in enumerate(suite.added):
                (work / "added" / str(n)).write_text(content)
            (work / "eval.sh").write_text(eval_script(task, spec, suite, bool(patch and patch.strip())))
            slowed = testenv.slowdown()
            timeout = suite_timeout(suite, self.settings.timeout_s, slowed)
            name = f"fixgraph-{uuid.uuid4().hex[:10]}"
            argv = ["docker", "run", "--rm", "--name", name, "--network", "none",
                    "--memory", f"{self.settings.memory_mb}m", "--ulimit", f"cpu={self.settings.cpu_s}",
                    "--pids-limit", "512", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                    "-v", f"{work}:/fixgraph:ro", image_name(self.settings.docker_namespace, task.instance_id),
                    "bash", "/fixgraph/eval.sh"]
            start = time.monotonic()
            timed_out = False
            try:
                proc = subprocess.run(argv, capture_output=True, timeout=timeout)
                out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                subprocess.run(["docker", "kill", name], capture_output=True, timeout=60)
                out, rc, timed_out = f"[fixgraph] killed after {timeout:g}s", -9, True
        finally:
            shutil.rmtree(work, ignore_errors=True)
        seconds = time.monotonic() - start
        body = out.split(START, 1)[-1].split(END, 1)[0] if START in out else out
        run = SuiteRun(parse_log(task.repo, body), out, seconds, timed_out=timed_out, network_isolated=True,
                       root="/testbed", backend="docker", timeout_s=timeout,
                       slowdown=testenv.slowdown_over(slowed))
        if rc == 98:
            run.error = "test_patch does not apply"
        elif rc == 97:
            run.notes.append("candidate patch does not apply in the image")
        return run


def make_docker_runner(settings: TestSettings, cache_dir: Path) -> DockerRunner | UnavailableRunner:
    why = engine_status()
    if why:
        return UnavailableRunner(f"docker backend: {why}", "docker", cache_dir.resolve())
    return DockerRunner(settings, cache_dir)
