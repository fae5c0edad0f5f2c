"""fixgraph.phases: a phase's own seconds (the inner phases' time is theirs), every thread's phases
recorded, a run beside the caller kept apart as overlapping, and nothing kept with no recorder on."""

from __future__ import annotations

import threading
import time

from fixgraph import phases


def test_inner_phase_time_is_not_counted_twice() -> None:
    with phases.recording() as rec:
        start = time.monotonic()
        with phases.phase("outer"):
            time.sleep(0.05)
            with phases.phase("inner"):
                time.sleep(0.1)
            time.sleep(0.05)
        wall = time.monotonic() - start
    assert 0.09 <= rec.seconds["outer"] < 0.2 and 0.09 <= rec.seconds["inner"] < 0.2, dict(rec.seconds)
    assert rec.total() <= wall
    assert rec.counts == {"outer": 1, "inner": 1}


def test_a_run_beside_the_caller_is_overlapping_not_summed() -> None:
    def side() -> None:
        with phases.beside(), phases.phase("patched run"):
            time.sleep(0.1)

    with phases.recording() as rec:
        start = time.monotonic()
        with phases.phase("base run"):
            t = threading.Thread(target=side)
            t.start()
            time.sleep(0.1)
            t.join()
        wall = time.monotonic() - start
    assert set(rec.seconds) == {"base run"} and rec.total() <= wall
    assert rec.overlapped["patched run"] >= 0.09


def test_timed_keeps_the_function_and_records_only_while_on() -> None:
    @phases.timed("work")
    def work(x: int) -> int:
        """Doubles."""
        return 2 * x

    assert work(2) == 4 and work.__name__ == "work" and work.__doc__ == "Doubles."
    with phases.recording() as rec:
        assert work(3) == 6
    assert rec.counts["work"] == 1
    assert work(4) == 8 and rec.counts["work"] == 1  # off again: nothing added


def test_a_phase_that_raises_still_counts_and_resumes_the_outer_one() -> None:
    with phases.recording() as rec:
        with phases.phase("outer"):
            try:
                with phases.phase("inner"):
                    raise ValueError("boom")
            except ValueError:
                pass
            time.sleep(0.05)
    assert rec.counts["inner"] == 1 and rec.seconds["outer"] >= 0.04
