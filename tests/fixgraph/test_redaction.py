"""Secrets are masked wherever test output is stored or sent: the central helper and its users."""

from __future__ import annotations

import time
from pathlib import Path

from langchain_core.messages import HumanMessage, SystemMessage

from bot.server import DeliveryLog
from fixgraph import redaction
from fixgraph.models.llm import _redacted
from fixgraph.records import RunStore, redact

SECRET = "sk-redaction-test-4f1d2e"


def test_registered_secret_is_masked_everywhere_text_is_kept(tmp_path: Path) -> None:
    redaction.register([SECRET, "ab"])  # too short to be a secret: ignored
    assert redaction.redact(f"key={SECRET}; ab") == "key=***; ab"
    assert redact(f"x {SECRET}", []) == "x ***"  # records' helper goes through the central one
    store = RunStore("r1", tmp_path / "preds", tmp_path / "runs", "m")
    store.write_record({"instance_id": "a__b-1", "log": f"the test printed {SECRET}"})
    assert SECRET not in store.record_path("a__b-1").read_text()


def test_prompts_are_redacted_before_they_leave() -> None:
    redaction.register([SECRET])
    convo = [SystemMessage(content="you fix bugs"), HumanMessage(content=f"the tests printed: {SECRET}")]
    sent = _redacted(convo)
    assert sent[0] is convo[0]  # untouched messages are not copied
    assert sent[1].content == "the tests printed: ***" and SECRET in str(convo[1].content)


def test_delivery_ids_persist_across_restarts_and_expire(tmp_path: Path) -> None:
    path = tmp_path / "deliveries.sqlite"
    now = [time.time()]
    log = DeliveryLog(path, retention_s=100, clock=lambda: now[0])
    assert log.first_time("d-1") and not log.first_time("d-1")
    log.close()
    now[0] += 99
    again = DeliveryLog(path, retention_s=100, clock=lambda: now[0])
    assert not again.first_time("d-1")  # a restart remembers
    now[0] += 200
    assert again.first_time("d-1")  # past the retention, the id is forgotten (and the table stays small)
