"""fixgraph: the state graph of five agents, and the command line.

    EVAL_MODE=true python graph.py --tasks stratified50 --dataset ../shared/data/swebench_lite.jsonl
"""

# No `from __future__ import annotations` here: LangGraph reads the edge functions' annotations
# (Runtime[...]) at compile time, and they name classes imported inside build_graph.
import argparse
import sys
from pathlib import Path
from typing import Any


def build_graph(checkpointer=None):  # noqa: ANN001 - any LangGraph checkpointer
    # Imported here, not at the top: `--help` and bad-input errors must not wait for LangGraph
    # and the agents (seconds on a cold start).
    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    from agents.coder import coder, rounds_done
    from agents.context import TaskContext
    from agents.critic import critic, should_retry
    from agents.explorer import explorer, needs_replan
    from agents.planner import planner
    from agents.pr_agent import pr_agent
    from agents.reproducer import reproducer
    from fixgraph.state import TaskState

    g = StateGraph(TaskState, context_schema=TaskContext)
    g.add_node("planner", planner)
    g.add_node("explorer", explorer)
    g.add_node("reproducer", reproducer)
    g.add_node("coder", coder)
    g.add_node("critic", critic)
    g.add_node("pr_agent", pr_agent)

    def stopped(state: TaskState) -> bool:
        return bool(state.get("stop_reason"))

    def after_planner(state: TaskState) -> str:
        return "pr_agent" if stopped(state) else "explorer"

    def after_explorer(state: TaskState) -> str:
        if stopped(state):
            return "pr_agent"
        return "planner" if needs_replan(state) else "reproducer"

    def after_reproducer(state: TaskState) -> str:
        return "pr_agent" if stopped(state) else "coder"

    def after_coder(state: TaskState, runtime: Runtime[TaskContext]) -> str:
        cfg = runtime.context.cfg
        if stopped(state):
            return "pr_agent"
        if state.get("verdict") == "CannotApply":
            return "coder" if rounds_done(state) < cfg.max_attempts else "pr_agent"
        return "critic" if cfg.critic.enabled else "pr_agent"

    def after_critic(state: TaskState, runtime: Runtime[TaskContext]) -> str:
        cfg = runtime.context.cfg
        return "coder" if should_retry(state, cfg.max_attempts, cfg.critic.fix_score_threshold) else "pr_agent"

    g.add_edge(START, "planner")
    g.add_conditional_edges("planner", after_planner, ["explorer", "pr_agent"])
    g.add_conditional_edges("explorer", after_explorer, ["planner", "reproducer", "pr_agent"])
    g.add_conditional_edges("reproducer", after_reproducer, ["coder", "pr_agent"])
    g.add_conditional_edges("coder", after_coder, ["coder", "critic", "pr_agent"])
    g.add_conditional_edges("critic", after_critic, ["coder", "pr_agent"])
    g.add_edge("pr_agent", END)
    return g.compile(checkpointer=checkpointer)


def make_graph() -> Any:
    """The compiled graph with no checkpointer and no key: the entry named in langgraph.json."""
    return build_graph()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from fixgraph.dataset import DATASET_HELP
    from fixgraph.models.discover import ROLES
    from pipeline.cli import OneLineParser

    p = OneLineParser(prog="graph.py", description="Turn issues into verified patches.")
    p.add_argument("--tasks", default="stratified50", help="stratified50 | all | ID[,ID...]")
    p.add_argument("--dataset", help=DATASET_HELP)
    p.add_argument("--config", default="redo", help="a config name in configs/ or a TOML path")
    p.add_argument("--workers", type=int, help="tasks at once: threads (default 1); with --executor ray, a cap "
                   "on tasks in flight (default: what the cluster's CPUs fit)")
    p.add_argument("--executor", choices=["threads", "ray"], default="threads",
                   help="where tasks run: a thread pool here, or Ray (docs/ray.md)")
    p.add_argument("--ray-address", metavar="ADDR", help="join the Ray cluster at ADDR (default: start Ray here)")
    p.add_argument("--repos", type=Path, help="folder of local git mirrors to clone from instead of GitHub")
    p.add_argument("--run-id", help="records and predictions go under this id (default: the config's name)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--model", help="the model for every role (default: the config's, or what a local server lists)")
    for role in ROLES:
        p.add_argument(f"--model-{role}", metavar="NAME", help=f"the {role}'s model (overrides --model)")
    p.add_argument("--check", action="store_true",
                   help="check the LLM endpoint, models, pyright, git, the test backend and GitHub; with --dataset, "
                   "also each task's env (interpreter, system packages); run nothing")
    p.add_argument("--repo", type=Path, metavar="DIR",
                   help="with --check: the environment inferred for the git checkout DIR, built, and its test "
                   "command run at HEAD (what the bot would do on that repository)")
    p.add_argument("--prepare", action="store_true",
                   help="clone and build every env the tasks need (up to --workers at once); no LLM call")
    p.add_argument("--require-tests", action="store_true",
                   help="a task whose tests cannot run on this machine fails instead of being scored without them")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pipeline.cli import run_cli

    return run_cli(args, build_graph)


if __name__ == "__main__":
    sys.exit(main())
