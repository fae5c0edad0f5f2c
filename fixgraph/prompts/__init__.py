"""Prompt templates: Jinja2 files beside this module, rendered strictly."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

PROMPTS_DIR = Path(__file__).resolve().parent


@cache
def _env() -> Environment:
    return Environment(
        loader=FileSystemLoader(PROMPTS_DIR),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(name: str, **variables: object) -> str:
    """Render ``prompts/<name>.j2``; a variable the template uses but was not given is an error."""
    return _env().get_template(f"{name}.j2").render(**variables)
