"""Paired comparisons of two configs on the same tasks: exact McNemar test and a bootstrap interval.

Both take per-task outcomes in the same task order, so a task is compared with itself: the
question is whether config B resolves tasks config A does not, more often than the reverse.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from math import comb


@dataclass(frozen=True)
class Paired:
    """Config B against config A on the tasks both have results for."""

    n: int
    wins: int  # B resolved, A did not
    losses: int  # A resolved, B did not
    both: int  # both resolved
    neither: int  # neither resolved

    @property
    def ties(self) -> int:
        return self.both + self.neither

    @property
    def delta(self) -> float:
        """Difference in resolved rate, B minus A, as a fraction."""
        return (self.wins - self.losses) / self.n if self.n else 0.0


def pair(a: list[bool], b: list[bool]) -> Paired:
    if len(a) != len(b):
        raise ValueError("paired outcomes must have the same length")
    wins = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    losses = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    both = sum(1 for x, y in zip(a, b, strict=True) if x and y)
    return Paired(n=len(a), wins=wins, losses=losses, both=both, neither=len(a) - wins - losses - both)


def mcnemar_exact(wins: int, losses: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2.

    With b + c discordant pairs, p = min(1, 2 * P(X <= min(b, c))) for X ~ Binomial(b + c, 1/2).
    Ties carry no information about which config is better, so they do not enter.
    """
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(comb(n, i) for i in range(k + 1))
    # Integer arithmetic until the last step keeps the tail exact for any realistic n.
    return min(1.0, 2 * tail / 2**n)


def bootstrap_delta_ci(a: list[bool], b: list[bool], *, resamples: int = 10_000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for the delta in resolved rate (B minus A).

    Tasks are resampled with replacement as pairs, which keeps the pairing that McNemar uses.
    Seeded, so the same records give the same page.
    """
    n = len(a)
    if n != len(b):
        raise ValueError("paired outcomes must have the same length")
    if n == 0:
        return (0.0, 0.0)
    diffs = [int(y) - int(x) for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    deltas = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    lo_q = (1.0 - level) / 2
    return (_quantile(deltas, lo_q), _quantile(deltas, 1.0 - lo_q))


def bootstrap_mean_ci(values: list[float], *, resamples: int = 10_000, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for a mean (used for per-task differences in fix_score)."""
    n = len(values)
    if n == 0:
        return (0.0, 0.0)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    lo_q = (1.0 - level) / 2
    return (_quantile(means, lo_q), _quantile(means, 1.0 - lo_q))


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), so results match it."""
    if not sorted_values:
        raise ValueError("no values")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac
