"""The task runner with this project's graph, as ``python graph.py`` runs it."""

from __future__ import annotations

import functools

from graph import build_graph
from pipeline.tasks import run_task as _run_task
from pipeline.tasks import run_tasks as _run_tasks

run_tasks = functools.partial(_run_tasks, build_graph=build_graph)
run_task = functools.partial(_run_task, build_graph=build_graph)
