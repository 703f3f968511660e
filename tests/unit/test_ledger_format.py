"""Ledger keys and values and which entries count for a write."""

from __future__ import annotations

import json
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
    LedgerKey("p", '["v2",', 0),
]


def test_a_format_2_key_is_a_compact_json_array() -> None:
    key = LedgerKey("orders", "orders/clean/2024-05-04", 3)

    assert key.encode() == b'["v2","orders","orders/clean/2024-05-04",3]'


@pytest.mark.parametrize("key", TRICKY_KEYS, ids=str)
def test_keys_decode_to_what_they_encode(key: LedgerKey) -> None:
    assert LedgerKey.decode(key.encode()) == key


def test_different_keys_never_encode_alike() -> None:
    assert len({key.encode() for key in TRICKY_KEYS}) == len(TRICKY_KEYS)


@pytest.mark.parametrize("raw", [b"no-slash", b"w/0", b"w/x", b"\xff/0", b'["v2",\xff]',
                                 b'["v2","p","w"]', b'["v2","p","w",-1]', b'["v2","p","w",true]',
                                 b'["v3","p","w",1]', b'["v2",1,"w",1]'])
def test_other_bytes_are_no_ledger_key(raw: bytes) -> None:
    assert LedgerKey.decode(raw) is None


def test_a_key_belongs_to_exactly_its_own_write() -> None:
    assert LedgerKey("app", "w", 0).belongs_to("app", "w")
    assert not LedgerKey("other", "w", 0).belongs_to("app", "w")
    assert not LedgerKey("app", "w/x", 0).belongs_to("app", "w")


def test_an_entry_value_is_a_json_object() -> None:
    entry = LedgerEntry("app", "w", 2, 4, 100, ("out",))

    assert json.loads(entry.value()) == {
        "format": 2, "transactional_id_prefix": "app", "write_id": "w", "index": 2,
        "num_partitions": 4, "records": 100, "topics": ["out"]}
    assert LedgerEntry.from_value(entry.value()) == entry
    with pytest.raises(LedgerError, match="not a ledger entry"):
        LedgerEntry.from_value(b'{"write_id": "w"}')
    without_prefix = json.dumps({"index": 2, "num_partitions": 4, "records": 100,
                                 "topics": ["out"], "write_id": "w"}).encode()
    with pytest.raises(LedgerError, match="not a ledger entry"):
        LedgerEntry.from_value(without_prefix)


def test_the_partition_is_crc32_of_the_write_id() -> None:
    assert ledger_partition("abc", 8) == 891568578 % 8


def _record(offset: int, entry: LedgerEntry) -> InternalRecord:
    return InternalRecord(entry.key().encode(), entry.value(), offset)


def test_committed_entries_scope_by_prefix_and_exact_write_id() -> None:
    own0 = LedgerEntry("app", "w", 0, 5, 10, ("out",))
    own3 = LedgerEntry("app", "w", 3, 5, 10, ("out",))
    records = [
        _record(0, own0),
        _record(1, LedgerEntry("other-app", "w", 1, 5, 10, ("theirs",))),
        _record(2, LedgerEntry("app", "w/longer", 2, 5, 10, ("out",))),
        _record(3, own3),
        InternalRecord(own3.key().encode(), None, 4),  # a tombstone forgets task 3
        InternalRecord(b"w/1", b"{}", 5),
        InternalRecord(b"unrelated", b"{}", 6),
    ]

    assert committed_entries(records, transactional_id_prefix="app", write_id="w") == {0: own0}


def test_committed_entries_reject_a_value_that_disagrees_with_its_key() -> None:
    forged = InternalRecord(LedgerKey("app", "w", 0).encode(),
                            LedgerEntry("app", "w", 1, 2, 10, ("out",)).value(), 17)

    with pytest.raises(LedgerError, match="at offset 17 has the key"):
        committed_entries([forged], transactional_id_prefix="app", write_id="w")


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
