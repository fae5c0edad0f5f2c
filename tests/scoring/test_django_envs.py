"""django in the venv backend: requirements left out with their reasons, the spec's exports, labels."""

from __future__ import annotations

from scoring.execution import envs, specs


def test_requirements_needing_system_libraries_or_services_are_left_out_with_the_reason() -> None:
    reqs = ("asgiref >= 3.2\n# pylibmc/libmemcached can't be built on Windows.\n"
            "pylibmc; sys.platform != 'win32'\npywatchman; sys.platform != 'win32'\nPyYAML\n")
    kept, dropped = envs.without_left_out("django/django", reqs)
    lines = [ln for ln in kept.splitlines() if not ln.startswith("#")]
    assert not any(ln.startswith(("pylibmc", "pywatchman")) for ln in lines)
    assert "asgiref >= 3.2" in kept and "PyYAML" in kept
    assert set(dropped) == {"pylibmc", "pywatchman"}
    assert "libmemcached" in dropped["pylibmc"] and "watchman service" in dropped["pywatchman"]
    # every other repository keeps its requirements as they are
    assert envs.without_left_out("pallets/flask", reqs) == (reqs, {})


def test_the_specs_exports_become_env_vars_with_a_locale_this_machine_has() -> None:
    spec = specs.repo_specs(specs.Path("."), "django/django", "3.0")
    assert spec is not None
    env = specs.eval_env(spec)
    assert env["LANG"] == "C.UTF-8" and env["LC_ALL"] == "C.UTF-8"
    assert env["LANGUAGE"] == "en_US:en"
    assert not any("locale" in k.lower() for k in env)  # locale-gen is a system step, left out
    assert specs.eval_env(None) == {}


def test_django_is_run_by_labels_and_single_tests_by_dotted_names() -> None:
    files = ["tests/utils_tests/test_text.py", "tests/admin_views/tests.py::AdminViewBasicTest::test_x",
             "tests/forms_tests/field_tests/test_charfield.py"]
    assert specs.test_directives("django/django", files) == [
        "utils_tests.test_text", "admin_views.tests.AdminViewBasicTest.test_x",
        "forms_tests.field_tests.test_charfield"]
    spec = specs.repo_specs(specs.Path("."), "django/django", "4.0")
    assert specs.takes_test_labels(spec) and not specs.takes_node_ids(spec)
    assert not specs.takes_test_labels(specs.repo_specs(specs.Path("."), "sympy/sympy", "1.1"))
    argv, env = specs.test_command("django/django", spec, "/py")
    assert argv[:2] == ["/py", "tests/runtests.py"] and "--settings=test_sqlite" in argv


def test_env_bench_builds_one_env_per_version_and_refuses_bad_input(tmp_path, capsys) -> None:  # noqa: ANN001
    from eval import env_bench
    from fixgraph.dataset import Instance

    rows = [Instance.model_validate({"instance_id": f"django__django-{n}", "repo": "django/django",
                                     "base_commit": "a" * 40, "problem_statement": "x", "version": v, "patch": "",
                                     "test_patch": "", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"})
            for n, v in ((3, "4.0"), (1, "3.0"), (2, "4.0"), (4, "10.0"))]
    firsts = env_bench.first_per_version(rows, {"django"})
    assert [(i.instance_id, i.version) for i in firsts] == [
        ("django__django-1", "3.0"), ("django__django-2", "4.0"), ("django__django-4", "10.0")]
    assert env_bench.first_per_version(rows, {"flask"}) == []
    assert env_bench.main(["--dataset", str(tmp_path / "none.jsonl"), "--repos", str(tmp_path)]) == 2
    assert "dataset not found" in capsys.readouterr().err
