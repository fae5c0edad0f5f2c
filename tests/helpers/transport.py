"""Reading a run's event lines for what the transport did that a test did not ask for."""

from __future__ import annotations

import re


def transport_blips(err: str, injected: str = "") -> list[str]:
    """The event lines of tries retried after a connection fault the test did not inject.

    Now and then, on a loaded machine (CI, three times), one request of a test never reaches the
    loopback server and is retried. That is the transport rule at work, not what a test counts, so
    counts of the requests a server saw leave such tries out. ``injected``: the text of the
    connection fault the test's server commits on purpose (its retry lines are not blips).
    """
    lines = [ln for ln in err.splitlines() if re.search(r": connection after [\d.]+ s; retry ", ln)]
    return [ln for ln in lines if not injected or injected not in ln]
