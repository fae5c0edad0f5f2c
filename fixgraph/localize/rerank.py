"""The learned re-ranking of localization's top candidates.

The linear formula of ``fixgraph.localize`` (``combine``) ranks every file; its best POOL files
are then put in order by a linear model over FEATURES, each instance-normalized (a signal relative
to its best file, a rank as its reciprocal), so that one set of coefficients means the same on
every issue and repository. The model only reorders the pool: which files make the top POOL is
the formula's choice, so the recall at POOL is the formula's, and what the model can change is
which of them comes first (recall@1 was where the formula was weakest; re-ranking a longer pool
lost more files from the top 8 than it brought, cross-validated).

The coefficients (``COEF``) are fitted by ``eval.localization_bench --fit`` with a listwise
softmax loss (the gold files' share of the pool's probability) and an L2 penalty whose strength is
chosen by leave-one-repository-out cross-validation; the benchmark reports the recall when each
repository is ranked by a model fitted without it (the strength itself chosen on the other eight).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

POOL = 8  # the linear ranking's top files that are re-ranked
FEATURES = ("base", "base_rr", "lexical", "defs", "written", "named", "history", "history_rr", "tests",
            "literal", "title", "api", "handler", "hist_api", "is_test", "is_other")
# Not penalized by the fit: with a strong penalty the model comes back to the linear order.
UNPENALIZED = ("base", "base_rr")
# Empty: the re-ranking is off. Cross-validated on the 140 Lite instances of the nine mirrored
# repositories it changed recall@1 by one or two instances either way depending on the linear
# signals beneath it (-2 with the title alone, +1 with the title and the prose), with the L2 chosen
# anywhere from 0.1 to 10 across folds: not a stable gain (README, "Localization"). To try it,
# paste what ``python -m eval.localization_bench ... --fit`` prints (coefficients of the raw
# features, scaling folded in).
COEF: dict[str, float] = {}


def _rel(signal: Mapping[str, float], path: str) -> float:
    best = max(signal.values(), default=0.0)
    return signal.get(path, 0.0) / best if best > 0 else 0.0


class Signals(Protocol):
    """What the features read of ``fixgraph.localize.RankParts`` (a protocol, so that this module
    does not import the one that imports it)."""

    history: dict[str, float]
    tests: dict[str, float]
    literal: dict[str, float]
    lexical: dict[str, float]
    defs: dict[str, float]
    written: dict[str, float]
    named: dict[str, float]
    api: dict[str, float]
    handler: dict[str, float]
    hist_api: dict[str, float]
    title: dict[str, float]


def features(parts: Signals, linear: Sequence[tuple[str, float]],
             penalty: Callable[[str], float]) -> dict[str, list[float]]:
    """FEATURES of each of the linear ranking's top POOL files (path, score), in that order;
    ``penalty`` is the formula's (0.2 for tests, 0.4 for docs and other files, 1 for code)."""
    best = max((score for _, score in linear), default=0.0) or 1.0
    hist_rank = {p: i for i, (_, p) in enumerate(sorted((-s, p) for p, s in parts.history.items()))}
    out: dict[str, list[float]] = {}
    for i, (path, score) in enumerate(linear[:POOL]):
        kind = penalty(path)
        values = {
            "base": score / best,
            "base_rr": 1.0 / (1 + i),
            "lexical": parts.lexical.get(path, 0.0),
            "defs": _rel(parts.defs, path),
            "written": _rel(parts.written, path),
            "named": parts.named.get(path, 0.0),
            "history": _rel(parts.history, path),
            "history_rr": 1.0 / (1 + hist_rank[path]) if path in hist_rank else 0.0,
            "tests": _rel(parts.tests, path),
            "literal": _rel(parts.literal, path),
            "title": _rel(parts.title, path),
            "api": _rel(parts.api, path),
            "handler": _rel(parts.handler, path),
            "hist_api": _rel(parts.hist_api, path),
            "is_test": float(kind == 0.2),
            "is_other": float(kind == 0.4),
        }
        out[path] = [values[name] for name in FEATURES]
    return out


def coef_vector(coef: Mapping[str, float]) -> np.ndarray:
    return np.array([coef.get(name, 0.0) for name in FEATURES])


def order(feats: Mapping[str, Sequence[float]], coef: Mapping[str, float]) -> list[str]:
    """The pool's files (in the linear order in ``feats``) best first under ``coef``."""
    paths = list(feats)
    if not paths:
        return []
    x = np.array([feats[p] for p in paths], dtype=np.float64)
    return top_of(x, paths, list(range(len(paths))), coef_vector(coef))


# ---- fitting (used by eval.localization_bench) ------------------------------------------------

Instance = tuple[np.ndarray, np.ndarray]  # (pool features, gold mask); at least one gold in the pool


def fit(instances: Sequence[Instance], l2: float, iters: int = 50) -> np.ndarray:
    """Coefficients minimizing the listwise softmax loss + l2 |w|^2 / 2 (Newton's method), on
    standardized features; returned for the raw features. The linear ranking's own features
    (UNPENALIZED) are not penalized: the stronger the penalty, the nearer the model comes to the
    linear ranking it re-ranks, rather than to an arbitrary one."""
    instances = [(x, g) for x, g in instances if len(x) and g.sum() > 0]
    if not instances:
        return np.zeros(len(FEATURES))
    x = np.vstack([x for x, _ in instances])
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    x = (x - mean) / std
    target = np.concatenate([g / g.sum() for _, g in instances])  # the gold files share each instance's mass
    sizes = np.array([len(g) for _, g in instances])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    seg = np.repeat(np.arange(len(instances)), sizes)
    n, d = len(instances), x.shape[1]
    penalty = l2 * np.array([0.0 if name in UNPENALIZED else 1.0 for name in FEATURES])

    def evaluate(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ w
        top = np.maximum.reduceat(z, starts)
        e = np.exp(z - top[seg])
        total = np.add.reduceat(e, starts)
        value = float(np.sum(np.log(total) + top) - target @ z) / n + 0.5 * float(penalty @ (w * w))
        return value, e / total[seg]

    w = np.zeros(d)
    current, p = evaluate(w)
    for _ in range(iters):
        grad = x.T @ (p - target) / n + penalty * w
        xp = x * p[:, None]
        per = np.add.reduceat(xp, starts)
        hess = (xp.T @ x - per.T @ per) / n + np.diag(penalty) + 1e-9 * np.eye(d)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            trial = w - t * step
            value, p_trial = evaluate(trial)
            if value <= current or t < 1e-4:
                break
            t /= 2
        if value > current:
            break
        done = current - value < 1e-10
        w, current, p = trial, value, p_trial
        if done:
            break
    return w / std


def top_of(x: np.ndarray, paths: Sequence[str], base_order: Sequence[Any], w: np.ndarray) -> list[str]:
    """The pool's files best first under coefficients ``w`` (ties by ``base_order``: the linear order)."""
    z = x @ w
    order = sorted(range(len(paths)), key=lambda i: (-round(float(z[i]), 9), base_order[i]))
    return [paths[i] for i in order]
