"""Tests that need the internet: not runnable here, never a verdict.

Test runs happen in a sandbox with a network namespace of its own: loopback works (psf/requests
gets a local httpbin, ``scoring.execution.services``), nothing else does (no DNS, no route). A
test that names an internet host itself (``https://httpbin.org/...``, ``www.google.co.uk``) fails
here on a name lookup, and one that waits for a connect timeout to an unroutable address
(``10.255.255.1``) fails at once with "Network is unreachable", with any patch: the harness's
containers reach the internet, so such a test says nothing of a patch here.

The evidence is the run at the base commit (the instance's tests without the patch), never the
run being graded: a test the base run shows failing, whose crash record (the pytest plugin's,
``scoring.runtime.pytest_crash_plugin``) is a network error, is set aside for every prediction of
the instance alike. A test that expects the network error (a check that a bad host raises
``ConnectionError``) and fails at the base for the wrong exception is set aside too: nothing
here tells it from one that needs the internet, and losing it only loses evidence, never gives a
wrong verdict. Runners without the plugin (Django's, sympy's, tox) leave no record, so none of
their tests is set aside.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from scoring.execution.testenv import PASSING, SuiteRun, listed_head

NEEDS_INTERNET = "needs the internet (not reachable from the sandbox)"

# A name lookup that failed (socket.gaierror: glibc's words, then macOS's), or a connect with no
# route: what a test that reaches for the internet gets here. requests' ConnectionError and
# urllib3's MaxRetryError/NewConnectionError carry these words in their messages; a refused
# connection (a local server that is down) is no such error.
NETWORK_ERROR = re.compile(
    r"gaierror|Name or service not known|Temporary failure in name resolution|nodename nor servname"
    r"|No address associated with hostname|Network is unreachable|ENETUNREACH")


def network_failure(record: Mapping[str, Any]) -> bool:
    """Whether a crash record says its test failed for want of the internet."""
    return bool(NETWORK_ERROR.search(f"{record.get('type', '')}: {record.get('message', '')}"))


def needs_internet(base: SuiteRun, ids: Iterable[str]) -> dict[str, str]:
    """Of a dataset's test ``ids``, those ``base`` (the run without the patch) shows failing on a
    network error, each with the reason. A test is matched by its crash record's node id, or by its
    module's when the module itself failed to import."""
    listed = set(ids)
    failing: dict[str, str] = {}  # a listed id -> its full id in the base run
    for full, status in base.statuses.items():
        if status in PASSING or status == "SKIPPED":
            continue
        key = full if full in listed else listed_head(full)
        if key in listed:
            failing[key] = full
    # Not reported at all: its module may have failed to import (a lookup at import time).
    reported = {*base.statuses, *map(listed_head, base.statuses)}
    failing.update({t: t for t in listed if t not in failing and t not in reported})
    records = [r for r in base.crash_records if network_failure(r)]
    out: dict[str, str] = {}
    for listed_id, full in failing.items():
        for rec in records:
            node = str(rec.get("nodeid", ""))
            if node and (node == full or full.startswith(node + "::")):
                out[listed_id] = NEEDS_INTERNET
                break
    return out

