"""The user guide: every command-line option and config key is documented, the README stays a
short guide with its three commands first, and the documentation site builds strictly and renders
in a real headless Chromium.

Options are read from the argparse parsers themselves (``parse_args`` is intercepted when the
command calls it, so the check sees exactly the parser the command builds) and config keys from the
pydantic ``RunConfig``, walked recursively; each must appear, in backticks, in
``docs/configuration.md`` (options in their command's section). The planted-option and
planted-key tests show the check reports what is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import importlib.util
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args, get_origin
from unittest import mock

import pytest
from pydantic import BaseModel

from fixgraph.config import CriticSettings, RunConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
README_COMMANDS = [
    'pip install -e ".[dev]"',
    "EVAL_MODE=true python graph.py --tasks stratified50",
    "python -m pytest -q",
]


# --- command-line options -------------------------------------------------------------------------

class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def capture_parser(call: Callable[[], Any]) -> argparse.ArgumentParser:
    """The parser a command builds: its ``parse_args`` raises with the parser instead of parsing."""

    def intercept(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", intercept):
        try:
            call()
        except _Captured as got:
            return got.parser
    raise AssertionError(f"{call} returned without parsing its arguments")


def _graph() -> Any:
    import graph

    return graph.parse_args([])


def _bot() -> Any:
    from bot import __main__ as bot_main

    return bot_main.parse_args([])


def _eval_run() -> Any:
    from eval import run

    return run.parse_args([])


def _ingest() -> Any:
    from eval import ingest

    return ingest.main([])


def _dashboard() -> Any:
    from eval.dashboard import page as dashboard

    return dashboard.main([])


def _critic() -> Any:
    from scoring.verdict import judge

    return judge.main([])


# Each command, and the heading of its section in docs/configuration.md.
COMMANDS: list[tuple[str, Callable[[], Any]]] = [
    ("python graph.py", _graph),
    ("python -m bot", _bot),
    ("python -m eval.run", _eval_run),
    ("python -m eval.ingest", _ingest),
    ("python -m eval.dashboard", _dashboard),
    ("python -m scoring.verdict.judge", _critic),
]


def options(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every option (its long spelling), positional and subcommand, subcommands' own included."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield sub.prog
                yield from options(sub)
        elif action.option_strings:
            yield max(action.option_strings, key=len)
        else:
            yield str(action.metavar or action.dest)


def section(text: str, heading: str) -> str:
    """The part of a Markdown page under the heading that reads `heading`, up to the next heading
    of the same or a higher level."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(#{1,6}) `" + re.escape(heading) + "`\\s*$", line)
        if m:
            level = len(m.group(1))
            end = next((j for j in range(i + 1, len(lines))
                        if re.match("^#{1," + str(level) + "} ", lines[j])), len(lines))
            return "\n".join(lines[i + 1:end])
    raise AssertionError(f"no section `{heading}` in {CONFIG_PAGE.relative_to(ROOT)}")


def documented(name: str, text: str) -> bool:
    """``name`` written in backticks, as the start of a code span (`--workers N` counts)."""
    return re.search("`" + re.escape(name) + r"(?![\w-])", text) is not None


def missing_options(parser: argparse.ArgumentParser, text: str) -> list[str]:
    return [name for name in options(parser) if not documented(name, text)]


@pytest.mark.parametrize("heading,call", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_option_is_documented(heading: str, call: Callable[[], Any]) -> None:
    parser = capture_parser(call)
    found = list(options(parser))
    assert found, heading
    text = section(CONFIG_PAGE.read_text(encoding="utf-8"), heading)
    assert missing_options(parser, text) == [], f"options of {heading} missing from docs/configuration.md"


def test_a_planted_option_is_reported_missing() -> None:
    parser = capture_parser(_graph)
    text = section(CONFIG_PAGE.read_text(encoding="utf-8"), "python graph.py")
    assert missing_options(parser, text) == []
    parser.add_argument("--frobnicate-everything", action="store_true")
    assert missing_options(parser, text) == ["--frobnicate-everything"]
    # An option of a subcommand, and a subcommand, count too.
    bot = capture_parser(_bot)
    bot_text = section(CONFIG_PAGE.read_text(encoding="utf-8"), "python -m bot")
    assert missing_options(bot, bot_text) == []
    subs = next(a for a in bot._actions if isinstance(a, argparse._SubParsersAction))
    subs.choices["poll"].add_argument("--jitter-s", type=float)
    subs.add_parser("replay")
    assert missing_options(bot, bot_text) == ["--jitter-s", "python -m bot replay"]
    # Documented in another command's section is not documented for this one.
    assert "--configs" in list(options(capture_parser(_eval_run)))
    assert not documented("--configs", text)


# --- config keys -------------------------------------------------------------------------------

def _model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def config_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key path (``judge.static``); a table of models (``llm.prices``) is the key itself and
    its entries' keys with a placeholder (``llm.prices.<key>.input``)."""
    for name, field in model.model_fields.items():
        path = prefix + name
        nested = _model(field.annotation)
        if nested is not None:
            yield from config_keys(nested, path + ".")
            continue
        yield path
        args = get_args(field.annotation)
        if get_origin(field.annotation) is dict and len(args) == 2 and _model(args[1]) is not None:
            yield from config_keys(args[1], path + ".<key>.")


def key_documented(path: str, text: str) -> bool:
    pattern = r"\.".join("<[^>`]+>" if part == "<key>" else re.escape(part) for part in path.split("."))
    return re.search("`" + pattern + "`", text) is not None


def missing_keys(model: type[BaseModel], text: str) -> list[str]:
    return [key for key in config_keys(model) if not key_documented(key, text)]


def test_every_config_key_is_documented() -> None:
    keys = list(config_keys(RunConfig))
    # The walk reaches every level: a top-level key, nested ones, and a table's entries.
    assert {"max_attempts", "critic.static", "llm.models.coder", "llm.prices", "llm.prices.<key>.input",
            "executor.repo_resources.<key>.memory_mb", "github.allowlist"} <= set(keys)
    assert len(keys) > 100
    assert missing_keys(RunConfig, CONFIG_PAGE.read_text(encoding="utf-8")) == []


def test_a_planted_config_key_is_reported_missing() -> None:
    class Critic(CriticSettings):
        hunch_level: int = 3

    class Config(RunConfig):
        critic: Critic = Critic()
        espresso_shots: int = 2

    text = CONFIG_PAGE.read_text(encoding="utf-8")
    assert missing_keys(Config, text) == ["critic.hunch_level", "espresso_shots"]
    # A key must be written whole: `judge.static` is not `static`, nor `critic`.
    assert not key_documented("critic.static", "`static` under `[critic]`")


def test_the_example_config_loads(tmp_path: Path) -> None:
    text = CONFIG_PAGE.read_text(encoding="utf-8")
    example = re.search(r"A minimal config of your own:\n\n```toml\n(.*?)```", text, re.S)
    assert example
    path = tmp_path / "mine.toml"
    path.write_text(example.group(1))
    cfg = load_config(str(path), env={})
    assert (cfg.name, cfg.critic.guard, cfg.llm.models.coder) == ("mine", "block", "qwen2.5-coder:32b")


# --- the README ------------------------------------------------------------------------------

def test_readme_is_a_short_guide_that_starts_with_the_three_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300  # wc -l
    block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert block, "README.md has no fenced block"
    commands = [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == README_COMMANDS


def test_readme_links_lead_somewhere() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    assert len(targets) > 10
    assert [t for t in targets if not (ROOT / t.split("#")[0]).exists()] == []


# --- the site, built and opened in a browser --------------------------------------------------

def _need_mkdocs() -> None:
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install -e '.[dev]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need_mkdocs()
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "configuration/index.html", "benchmarks/index.html",
                 "benchmarks/localization/index.html", "security/index.html"):
        assert (site / page).is_file(), page
    # SECURITY.md is included, not copied by hand.
    security = (site / "security" / "index.html").read_text(encoding="utf-8")
    assert "Who is trusted" in security and "The defences in short" in security


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _visible_text(dom: str) -> str:
    article = re.search(r'<article[^>]*class="[^"]*md-content__inner[^"]*"[^>]*>(.*?)</article>', dom, re.S)
    assert article, dom[:1000]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", article.group(1)))


@pytest.mark.slow
@pytest.mark.parametrize("page,expected", [
    ("configuration/", ["Configuration", "critic.static", "--model-critic", "python -m bot serve"]),
    ("benchmarks/", ["Benchmarks: current figures", "eval.localization_bench", "0.893"]),
], ids=["configuration", "benchmarks"])
def test_pages_render_in_chromium(site: Path, tmp_path: Path, page: str, expected: list[str]) -> None:
    from tests.eval.test_dashboard_browser import CHROMIUM, chromium, console_errors

    if CHROMIUM is None:
        pytest.skip("chromium is not installed: apt-get install chromium (Debian, Ubuntu), or put chromium on PATH")
    # The helper maps every host name to nothing, so a page reaching for the network shows it; the
    # site's own loopback server is the one exception (a later switch wins in Chromium).
    loopback = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
    with serve(site) as base:
        url = f"{base}/{page}"
        shot = tmp_path / "shot.png"
        proc = chromium(tmp_path, url, loopback, f"--screenshot={shot}", "--window-size=1280,1600")
        assert proc.returncode == 0, proc.stderr[-2000:]
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000  # a blank page compresses far smaller
        proc = chromium(tmp_path, url, loopback, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    # The theme's script ran (it marks the root element) and drew the navigation.
    assert re.search(r'<html[^>]*class="[^"]*js', dom) or 'data-md-component="navigation"' in dom
    assert 'class="md-header' in dom and "Getting started" in dom
    text = _visible_text(dom)
    for phrase in expected:
        assert phrase in text, (phrase, text[:500])
    assert console_errors(proc.stderr) == []


# --- docs paths cited in code ---------------------------------------------------------------------

CODE_DIRS = ["agents", "pipeline", "scoring", "fixgraph", "bot", "eval", "configs"]
DOCS_PATH = re.compile(r"docs/[A-Za-z0-9_./-]+?\.md")


def cited_docs_paths() -> dict[str, list[str]]:
    """Every ``docs/...md`` path named in the product code, eval and configs, with where it is."""
    files = [ROOT / "graph.py"] + [
        path for top in CODE_DIRS for path in sorted((ROOT / top).rglob("*"))
        if path.suffix in {".py", ".toml", ".md"} and "results" not in path.parts
    ]
    cited: dict[str, list[str]] = {}
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in DOCS_PATH.findall(line):
                cited.setdefault(match, []).append(f"{path.relative_to(ROOT)}:{number}")
    return cited


def test_every_docs_path_cited_in_code_exists() -> None:
    cited = cited_docs_paths()
    assert cited, "the scan found no docs path at all: it looks in the wrong place"
    missing = {path: where for path, where in cited.items() if not (ROOT / path).is_file()}
    assert not missing, f"docs pages cited but absent: {missing}"


# --- comments explain, not narrate ----------------------------------------------------------------

NARRATION = (r"[Ss]ession [0-9]+|issue [0-9]+|[0-9]+(st|nd|rd|th) pass"
             r"|([Ff]irst|[Ss]econd|[Tt]hird|[Ff]ourth|[Ff]ifth|[Ss]ixth|[Ss]eventh|[Ee]ighth|[Nn]inth|[Tt]enth|[Ee]leventh|[Tt]welfth) pass\b")
# History lives in git log and docs/notebook/; nothing else narrates it.
NARRATION_EXEMPT = [":!docs/notebook", ":!CHANGELOG.md"]


def test_no_comment_or_page_narrates_history() -> None:
    found = subprocess.run(
        ["git", "grep", "-nE", NARRATION, "--", ".", *NARRATION_EXEMPT, ":!tests/test_docs.py"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert found.returncode in (0, 1), found.stderr
    assert not found.stdout, f"history in comments or prose (git log keeps it):\n{found.stdout}"
