"""Ledger keys and values (format 2 and format 1) and which entries count for a write."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from airflow_provider_kafka_spark.errors import LedgerError
from airflow_provider_kafka_spark.offsets.internal_topics import InternalRecord
from airflow_provider_kafka_spark.spark.write.ledger import (
    LedgerEntry,
    LedgerKey,
    TaskInput,
    check_inputs,
    committed_entries,
    ledger_partition,
)

TRICKY_KEYS = [
    LedgerKey("orders", "orders/clean/2024-05-04", 3),
    LedgerKey("orders", "orders/clean", 3),
    LedgerKey("orders/clean", "2024-05-04", 3),
    LedgerKey("a", "b/0", 1),
    LedgerKey("a/b", "0", 1),
    LedgerKey('quote"\\', '["v2","x","y",1]', 0),
    LedgerKey("prä", "ünïcode/2024", 12),
    LedgerKey("p", "", 0),
    LedgerKey(None, "orders/clean/2024-05-04", 3),
    LedgerKey(None, "orders/clean", 3),
    LedgerKey(None, "b/0", 1),
    LedgerKey(None, '["v2",', 0),
    LedgerKey(None, "ünïcode/2024", 12),
]


def test_a_format_2_key_is_a_compact_json_array() -> None:
    key = LedgerKey("orders", "orders/clean/2024-05-04", 3)

    assert key.encode() == b'["v2","orders","orders/clean/2024-05-04",3]'
    assert LedgerKey(None, "orders/clean/2024-05-04", 3).encode() == b"orders/clean/2024-05-04/3"


@pytest.mark.parametrize("key", TRICKY_KEYS, ids=str)
def test_keys_decode_to_what_they_encode(key: LedgerKey) -> None:
    assert LedgerKey.decode(key.encode()) == key


def test_different_keys_never_encode_alike() -> None:
    assert len({key.encode() for key in TRICKY_KEYS}) == len(TRICKY_KEYS)


@pytest.mark.parametrize("raw", [b"no-slash", b"w/x", b"w/01", b"w/-1", b"w/", b"\xff/0",
                                 b'["v2","p","w"]', b'["v2","p","w",-1]', b'["v2","p","w",true]',
                                 b'["v3","p","w",1]', b'["v2",1,"w",1]'])
def test_other_bytes_are_no_ledger_key(raw: bytes) -> None:
    assert LedgerKey.decode(raw) is None


def test_a_key_belongs_to_its_own_write_or_is_a_format_1_key_of_exactly_its_write_id() -> None:
    assert LedgerKey("app", "w", 0).belongs_to("app", "w")
    assert LedgerKey(None, "w", 0).belongs_to("app", "w")
    assert not LedgerKey("other", "w", 0).belongs_to("app", "w")
    assert not LedgerKey("app", "w/x", 0).belongs_to("app", "w")
    assert not LedgerKey(None, "w/x", 0).belongs_to("app", "w")


def test_values_of_both_formats() -> None:
    entry = LedgerEntry("app", "w", 2, 4, 100, ("out",))
    legacy_value = json.dumps({"index": 2, "num_partitions": 4, "records": 100,
                               "topics": ["out"], "write_id": "w"}, sort_keys=True).encode()

    assert json.loads(entry.value()) == {
        "format": 2, "transactional_id_prefix": "app", "write_id": "w", "index": 2,
        "num_partitions": 4, "records": 100, "topics": ["out"]}
    assert LedgerEntry.from_value(entry.value()) == entry
    assert LedgerEntry.from_value(legacy_value) == LedgerEntry(None, "w", 2, 4, 100, ("out",))
    assert LedgerEntry(None, "w", 2, 4, 100, ("out",)).value() == legacy_value
    with pytest.raises(LedgerError, match="not a ledger entry"):
        LedgerEntry.from_value(b'{"write_id": "w"}')


def test_the_partition_is_crc32_of_the_write_id_as_in_format_1() -> None:
    assert ledger_partition("abc", 8) == 891568578 % 8


def _record(offset: int, entry: LedgerEntry) -> InternalRecord:
    return InternalRecord(entry.key().encode(), entry.value(), offset)


def test_committed_entries_scope_by_prefix_and_exact_write_id_and_trust_format_1_narrowly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    own0 = LedgerEntry("app", "w", 0, 5, 10, ("out",))
    own3 = LedgerEntry("app", "w", 3, 5, 10, ("out",))
    legacy1 = LedgerEntry(None, "w", 1, 5, 10, ("out",))
    records = [
        _record(0, own0),
        _record(1, LedgerEntry("other-app", "w", 1, 5, 10, ("theirs",))),
        _record(2, LedgerEntry(None, "w", 0, 5, 10, ("elsewhere",))),  # own0 wins
        _record(3, legacy1),
        _record(4, LedgerEntry(None, "w/longer", 2, 5, 10, ("out",))),
        _record(5, LedgerEntry(None, "w", 2, 5, 10, ("out", "elsewhere"))),
        _record(6, own3),
        InternalRecord(own3.key().encode(), None, 7),  # a tombstone forgets task 3
        InternalRecord(b"unrelated", b"{}", 8),
    ]
    caplog.set_level(logging.WARNING, logger="airflow_provider_kafka_spark")

    with_topic = committed_entries(records, transactional_id_prefix="app", write_id="w",
                                   output_topic="out")
    warnings = [r.getMessage() for r in caplog.records]
    caplog.clear()
    with_column = committed_entries(records, transactional_id_prefix="app", write_id="w",
                                    output_topic=None)

    assert with_topic == {0: own0, 1: legacy1}
    assert len(warnings) == 2
    assert "using format-1 entries" in warnings[0] and "tasks [1] of write_id 'w'" in warnings[0]
    assert "ignoring format-1 entries" in warnings[1] and "tasks [2] " in warnings[1]
    assert with_column == {0: own0}
    assert [r.getMessage() for r in caplog.records if "tasks [1, 2] " in r.getMessage()]


def test_committed_entries_reject_a_value_that_disagrees_with_its_key() -> None:
    forged = InternalRecord(LedgerKey("app", "w", 0).encode(),
                            LedgerEntry("app", "w", 1, 2, 10, ("out",)).value(), 17)

    with pytest.raises(LedgerError, match="at offset 17 has the key"):
        committed_entries([forged], transactional_id_prefix="app", write_id="w",
                          output_topic="out")


def test_an_entry_records_its_input_digest_and_one_without_reads_as_unknown() -> None:
    entry = LedgerEntry("app", "w", 2, 4, 100, ("out",), digest="00ff00ff00ff00ff")
    without = LedgerEntry("app", "w", 2, 4, 100, ("out",))

    assert json.loads(entry.value())["digest"] == "00ff00ff00ff00ff"
    assert LedgerEntry.from_value(entry.value()) == entry
    assert "digest" not in json.loads(without.value())
    assert LedgerEntry.from_value(without.value()).digest is None


def test_an_entry_differs_from_an_input_in_rows_topics_or_a_known_digest() -> None:
    entry = LedgerEntry("app", "w", 0, 2, 10, ("out",), digest="aa")

    assert TaskInput(10, ("out",), "aa").differences(entry) == []
    assert TaskInput(10, ("out",), None).differences(entry) == []
    assert TaskInput(10, ("out",), "aa").differences(replace(entry, digest=None)) == []
    assert TaskInput(12, ("out", "x"), "bb").differences(entry) == [
        "rows: 10 committed, 12 now",
        "topics: ['out'] committed, ['out', 'x'] now",
        "content digest: aa committed, bb now",
    ]


def test_check_inputs_names_the_write_the_task_and_the_remedy() -> None:
    entries = {0: LedgerEntry("app", "w", 0, 2, 10, ("out",), digest="aa"),
               1: LedgerEntry("app", "w", 1, 2, 10, ("out",), digest="cc")}
    inputs = [TaskInput(10, ("out",), "aa"), TaskInput(10, ("out",), "dd")]

    check_inputs({0: entries[0]}, inputs, transactional_id_prefix="app", write_id="w")
    with pytest.raises(LedgerError, match=r"write_id 'w' of transactional_id_prefix 'app' "
                                          r"already committed task 1 from other input "
                                          r"\(content digest: cc committed, dd now\).*"
                                          r"use a new write_id"):
        check_inputs(entries, inputs, transactional_id_prefix="app", write_id="w")
