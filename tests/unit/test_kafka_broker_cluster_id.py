"""The local broker's KRaft cluster id is never read as an option by Kafka's storage tool."""

from __future__ import annotations

import base64
import uuid

import pytest

from tools import kafka_broker


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))  # URL-safe base64 of 0xF8... starts with '-'
    assert base64.urlsafe_b64encode(dashed.bytes).decode().startswith("-")
    draws = iter([dashed, dashed, uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: next(draws))

    cluster_id = kafka_broker.new_cluster_id()

    assert cluster_id == base64.urlsafe_b64encode(b"\x01" * 16).decode().rstrip("=")
    assert len(cluster_id) == 22
