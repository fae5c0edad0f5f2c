"""The Docker backend: the official SWE-bench instance images, run with the docker CLI.

The image ``<namespace>/sweb.eval.x86_64.<instance id, "__" as "_1776_">:latest`` holds the repo
at ``/testbed`` with its conda env ``testbed`` installed. A run starts a throwaway container with
no network, the memory and CPU limits from config, applies the candidate patch, resets the test
files and applies ``test_patch``, runs swebench's test command for the repo and version, and
parses the output with swebench's log parsers. The "before" run is the same without the patch.

When no Docker engine answers (``docker version`` fails), every outcome is "not runnable" with
that reason, and the Critic's fallback applies.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import time
import uuid
from pathlib import Path

from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.workspace import Worktree, content_key
from scoring import crash
from scoring.specs import SpecsError, parse_log, patch_files, repo_specs, test_directives
from scoring.tests import LOG_TAIL_CHARS, PASSING, TestOutcome, TestRunner, UnavailableRunner

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


def eval_script(instance: Instance, spec: dict, with_patch: bool) -> str:
    test_files = [f for f in patch_files(instance.test_patch)]
    directives = test_directives(instance.repo, instance.test_patch, instance.FAIL_TO_PASS + instance.PASS_TO_PASS)
    reset = f"git checkout {instance.base_commit} -- {' '.join(map(shlex.quote, test_files))}" if test_files else "true"
    lines = [
        "source /opt/miniconda3/bin/activate", "conda activate testbed", "cd /testbed",
        "git config --global --add safe.directory /testbed",
        *spec.get("eval_commands", []),
    ]
    if with_patch:
        lines += ["git apply --whitespace=nowarn /fixgraph/patch.diff || "
                  "patch --batch --fuzz=5 -p1 -i /fixgraph/patch.diff || exit 97"]
    lines += [reset]
    if instance.test_patch.strip():
        lines += ["git apply --whitespace=nowarn /fixgraph/test.diff || exit 98"]
    lines += [f": '{START}'", f"{spec['test_cmd']} {' '.join(map(shlex.quote, directives))}", f": '{END}'"]
    return "\n".join(lines) + "\n"


class DockerRunner:
    def __init__(self, settings: TestSettings, cache_dir: Path):
        self.settings = settings
        self.cache_dir = cache_dir.resolve()

    def _one(self, instance: Instance, spec: dict, patch: str | None) -> tuple[dict[str, str], str, float, str]:
        work = self.cache_dir / "docker-runs" / uuid.uuid4().hex[:12]
        work.mkdir(parents=True)
        (work / "patch.diff").write_text(patch or "")
        (work / "test.diff").write_text(instance.test_patch)
        (work / "eval.sh").write_text(eval_script(instance, spec, patch is not None and bool(patch.strip())))
        name = f"fixgraph-{uuid.uuid4().hex[:10]}"
        argv = ["docker", "run", "--rm", "--name", name, "--network", "none",
                "--memory", f"{self.settings.memory_mb}m", "--ulimit", f"cpu={self.settings.cpu_s}",
                "-v", f"{work}:/fixgraph:ro", image_name(self.settings.docker_namespace, instance.instance_id),
                "bash", "/fixgraph/eval.sh"]
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=self.settings.timeout_s)
            out = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            subprocess.run(["docker", "kill", name], capture_output=True, timeout=60)
            out, rc = f"[fixgraph] killed after {self.settings.timeout_s:g}s", -9
        seconds = time.monotonic() - start
        err = {97: "candidate patch does not apply in the image", 98: "test_patch does not apply"}.get(rc, "")
        body = out.split(START, 1)[-1].split(END, 1)[0] if START in out else out
        return parse_log(instance.repo, body), out, seconds, err

    def run(self, instance: Instance, wt: Worktree, patch: str) -> TestOutcome:
        out = TestOutcome(runnable=False, reason="", backend="docker")
        if not instance.FAIL_TO_PASS:
            out.reason = "no FAIL_TO_PASS tests"
            return out
        try:
            spec = repo_specs(self.cache_dir, instance.repo, instance.version)
        except SpecsError as exc:
            spec, out.reason = None, str(exc)
        if spec is None:
            out.reason = out.reason or f"swebench has no specs for {instance.repo} version {instance.version!r}"
            return out
        key = content_key(instance.instance_id, instance.test_patch, "docker")
        cached = self.cache_dir / "test-baselines" / f"{instance.instance_id}-{key}.json"
        if cached.is_file():
            before = json.loads(cached.read_text())["statuses"]
        else:
            before, log, secs, err = self._one(instance, spec, None)
            out.seconds += secs
            if err or not before:
                out.reason = err or "nothing collected"
                out.log_tail = log[-LOG_TAIL_CHARS:]
                return out
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps({"statuses": before}))
        after, log, secs, err = self._one(instance, spec, patch)
        out.seconds += secs
        out.log_tail = log[-LOG_TAIL_CHARS:]
        out.network_isolated = True
        out.pass_to_pass_before = {t: before.get(t, "MISSING") for t in instance.PASS_TO_PASS}
        if err == "test_patch does not apply":
            out.reason = err
            return out
        out.runnable = True
        out.fail_to_pass = {t: after.get(t, "MISSING") for t in instance.FAIL_TO_PASS}
        out.pass_to_pass_after = {t: after.get(t, "MISSING") for t in instance.PASS_TO_PASS}
        failing = [t for t, s in out.fail_to_pass.items() if s not in PASSING]
        failing += [t for t, s in out.pass_to_pass_after.items()
                    if s not in PASSING and out.pass_to_pass_before.get(t) in PASSING]
        out.crash = crash.from_log(log, Path("/testbed"), failing) if failing else ""
        if err:
            out.notes.append(err)
        return out


def make_docker_runner(settings: TestSettings, cache_dir: Path) -> TestRunner:
    why = engine_status()
    if why:
        return UnavailableRunner(f"docker backend: {why}", "docker")
    return DockerRunner(settings, cache_dir)
