"""The unsafe-patch guard: each rule firing on a patch that deserves it, and not on a look-alike."""

from __future__ import annotations

import pytest

from eval.fixtures.critic_repo import edit, make_repo, snapshot
from eval.fixtures.guard_cases import BENIGN, BYPASSES, LOAD
from fixgraph.repo.workspace import Worktree
from scoring.static.guard import check_patch

TIDY = "    if os.path.exists(path):\n        return path\n"


@pytest.fixture(scope="module")
def wt(tmp_path_factory: pytest.TempPathFactory) -> Worktree:
    return make_repo(tmp_path_factory.mktemp("guard") / "repo")


def rules(wt: Worktree, rel: str, old: str, new: str) -> list[str]:
    patch = edit(wt, rel, old, new)
    before = snapshot(wt)
    found = check_patch(wt, patch)
    assert snapshot(wt) == before
    assert all(f["source"] == "guard" and f["file"] == rel for f in found)
    return sorted({f["rule"] for f in found})


# (rule, a patch that must fire it, a look-alike that must not) as (old, new) edits of pkg/util.py
CASES = {
    "process-exec": (
        (TIDY, TIDY + "    subprocess.run(['ls', path])\n"),
        (TIDY, TIDY + "    # subprocess.run(['ls', path])\n    run = len\n    run(path)\n"),
    ),
    "file-delete": (
        (TIDY, "    if os.path.exists(path):\n        os.remove(path)\n        return path\n"),
        (TIDY, "    if os.path.exists(path):\n        parts = [path]\n        parts.remove(path)\n"
               "        return path\n"),
    ),
    "eval-exec": (
        (LOAD, "        return eval(fh.read())\n"),
        (LOAD, "        import ast\n        return ast.literal_eval(fh.read())\n"),
    ),
    "dynamic-import": (
        (LOAD, "        import importlib\n        return importlib.import_module(fh.read())\n"),
        (LOAD, "        import importlib\n        return importlib.__name__\n"),
    ),
    "network": (
        (LOAD, "        import requests\n        return requests.get(fh.read()).json()\n"),
        (LOAD, "        get = dict(a=1).get\n        return get(fh.read())\n"),
    ),
    "unpickle": (
        (LOAD, "        import pickle\n        return pickle.loads(fh.read())\n"),
        (LOAD, "        import yaml\n        return yaml.load(fh, Loader=yaml.SafeLoader)\n"),
    ),
    "tls-verify-off": (
        (LOAD, "        import ssl\n        ctx = ssl.create_default_context()\n        ctx.check_hostname = False\n"
               "        return json.load(fh)\n"),
        (LOAD, "        import ssl\n        ctx = ssl.create_default_context()\n        ctx.check_hostname = True\n"
               "        return json.load(fh)\n"),
    ),
    "validation-off": (
        (LOAD, "        from PIL import ImageFile\n        ImageFile.LOAD_TRUNCATED_IMAGES = True\n"
               "        return json.load(fh)\n"),
        (LOAD, "        from PIL import ImageFile\n        ImageFile.LOAD_TRUNCATED_IMAGES = False\n"
               "        return json.load(fh)\n"),
    ),
    "swallowed-exception": (
        (LOAD, "        try:\n            return json.load(fh)\n        except Exception:\n            pass\n"),
        (LOAD, "        try:\n            return json.load(fh)\n        except ValueError:\n            pass\n"),
    ),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires(wt: Worktree, rule: str) -> None:
    (old, new), _ = CASES[rule]
    assert rule in rules(wt, "pkg/util.py", old, new)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_does_not_fire_on_a_look_alike(wt: Worktree, rule: str) -> None:
    _, (old, new) = CASES[rule]
    assert rules(wt, "pkg/util.py", old, new) == []


def test_finding_says_where_and_what(wt: Worktree) -> None:
    patch = edit(wt, "pkg/util.py", TIDY, TIDY + "    subprocess.run(['ls', path])\n")
    [found] = check_patch(wt, patch)
    assert found["rule"] == "process-exec" and found["symbol"] == "tidy"
    assert found["line"] == 14 and "subprocess.run" in found["message"]


def test_aliased_import_is_resolved(wt: Worktree) -> None:
    assert rules(wt, "pkg/util.py", LOAD, "        import subprocess as sp\n        return sp.check_output(['id'])\n") \
        == ["process-exec"]


def test_shell_true_and_verify_false(wt: Worktree) -> None:
    got = rules(wt, "pkg/util.py", LOAD, "        import requests\n"
                "        return requests.post('https://example.com', verify=False)\n")
    assert got == ["network", "tls-verify-off"]


def test_overwrite_outside_the_repository(wt: Worktree) -> None:
    assert rules(wt, "pkg/util.py", LOAD, "        open('/etc/hosts', 'w').write('x')\n        return 1\n") \
        == ["file-delete"]
    assert rules(wt, "pkg/util.py", LOAD, "        open('out.txt', 'w').write('x')\n        return 1\n") == []


def test_value_the_patch_introduced_reaches_an_old_protected_call(wt: Worktree) -> None:
    # The call line is unchanged; the patch changed what it runs.
    patch = edit(wt, "pkg/util.py", '    cmd = ["make", target]\n', '    cmd = "make " + target + "; rm -rf /"\n')
    found = check_patch(wt, patch)
    assert [(f["rule"], f["symbol"]) for f in found] == [("process-exec", "build")]
    assert "reaches the key argument of subprocess.run()" in found[0]["message"]
    assert "cmd" in found[0]["message"]


def test_value_that_does_not_reach_the_protected_call_is_fine(wt: Worktree) -> None:
    assert rules(wt, "pkg/util.py", '    cmd = ["make", target]\n',
                 '    label = target.upper()\n    print(label)\n    cmd = ["make", target]\n') == []


def test_validator_that_stops_raising_is_flagged(wt: Worktree) -> None:
    got = rules(wt, "pkg/util.py", '        raise ValueError("a name is required")\n', "        name = 'anonymous'\n")
    assert got == ["validation-off"]
    assert rules(wt, "pkg/util.py", '"a name is required"', '"a non-empty name is required"') == []


def test_validator_bypassed_by_an_early_return(wt: Worktree) -> None:
    assert rules(wt, "pkg/util.py", "def validate_name(name):\n", "def validate_name(name):\n    return name\n") \
        == ["validation-off"]


def test_edits_to_tests_and_ci(wt: Worktree) -> None:
    assert rules(wt, "tests/test_shapes.py", "> 3", "> 0") == ["edits-tests"]
    assert rules(wt, ".github/workflows/ci.yml", "on: push\n", "on: [push, pull_request]\n") == ["edits-ci"]
    assert rules(wt, "pkg/shapes.py", "self.r ** 2", "self.r * self.r") == []


def test_bare_except_pass_is_swallowing(wt: Worktree) -> None:
    assert rules(wt, "pkg/util.py", LOAD, "        try:\n            return json.load(fh)\n        except:\n"
                 "            pass\n") == ["swallowed-exception"]


def test_not_a_diff_gives_nothing(wt: Worktree) -> None:
    wt.reset()
    assert check_patch(wt, "not a diff") == []


@pytest.mark.parametrize("name", sorted(BYPASSES))
def test_bypass_is_flagged(wt: Worktree, name: str) -> None:
    rel, old, new, rule = BYPASSES[name]
    patch = edit(wt, rel, old, new)
    assert rule in {f["rule"] for f in check_patch(wt, patch)}


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_benign_look_alike_is_quiet(wt: Worktree, name: str) -> None:
    rel, old, new = BENIGN[name]
    patch = edit(wt, rel, old, new)
    assert check_patch(wt, patch) == []
