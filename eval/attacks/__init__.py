"""The attacks ``python -m eval.attack_bench`` runs: hostile code and hostile clients against the real
sandbox, git, guard, CLI and webhook server, one module per surface (``sandbox``: test processes and
the repository cache; ``guard``: the unsafe-patch guard and the Coder's edits; ``webhook``: the bot's
receiver; ``cli``: graph.py's bad input). Each registers itself with :func:`attack`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-attackbench-SECRET-7f3a9c"


@dataclass
class Attack:
    cls: str
    name: str
    run: Callable[[Path], str]  # "" when the defence held, else what got through
    quick: bool = True
    sandbox: bool = False  # only a sandbox with namespaces can hold it (see sandbox_mode())


ATTACKS: list[Attack] = []


def attack(cls: str, name: str, quick: bool = True,
           sandbox: bool = False) -> Callable[[Callable[[Path], str]], Callable[[Path], str]]:
    def register(fn: Callable[[Path], str]) -> Callable[[Path], str]:
        ATTACKS.append(Attack(cls, name, fn, quick, sandbox))
        return fn
    return register
