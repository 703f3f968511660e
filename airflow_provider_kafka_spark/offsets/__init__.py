"""The offset core: specs, subscriptions, resolved ranges, cluster access, resolution, commits,
completeness checks and the audit of what a task's runs read.

No Airflow and no Spark here: only confluent-kafka. Usable from any Python job::

    from airflow_provider_kafka_spark.offsets import Subscription, resolve_offsets

    ranges = resolve_offsets(
        {"bootstrap.servers": "127.0.0.1:9092"},
        Subscription.topics(["orders"]),
        "timestamp:2024-05-01T00:00:00Z",
        "timestamp:2024-05-01T01:00:00Z",
    )
"""

from airflow_provider_kafka_spark.errors import (
    CommitError,
    ConfigurationError,
    DataLossError,
    InternalTopicError,
    IntervalNotCompleteError,
    KafkaAuthenticationError,
    KafkaSparkError,
    OffsetResolutionError,
    OffsetSpecError,
    PinnedRequestChangedError,
)
from airflow_provider_kafka_spark.offsets.audit import Audit, audit
from airflow_provider_kafka_spark.offsets.cluster import admin_client, list_partitions
from airflow_provider_kafka_spark.offsets.commit import CommitResult, commit_offsets
from airflow_provider_kafka_spark.offsets.config import consumer_config
from airflow_provider_kafka_spark.offsets.pins import RunKey
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges, PartitionRange
from airflow_provider_kafka_spark.offsets.resolve import (
    TimestampStop,
    resolve_offsets,
    timestamp_stops,
)
from airflow_provider_kafka_spark.offsets.runs import RunRequest, RunResolution, resolve_run
from airflow_provider_kafka_spark.offsets.specs import (
    Committed,
    Earliest,
    FromTable,
    Latest,
    OffsetSpec,
    SpecificOffsets,
    Timestamp,
    parse_offset_spec,
)
from airflow_provider_kafka_spark.offsets.subscription import Subscription

__all__ = [
    "Audit",
    "CommitError",
    "CommitResult",
    "Committed",
    "ConfigurationError",
    "DataLossError",
    "Earliest",
    "FromTable",
    "InternalTopicError",
    "IntervalNotCompleteError",
    "KafkaAuthenticationError",
    "KafkaSparkError",
    "Latest",
    "OffsetRanges",
    "OffsetResolutionError",
    "OffsetSpec",
    "OffsetSpecError",
    "PinnedRequestChangedError",
    "PartitionRange",
    "RunKey",
    "RunRequest",
    "RunResolution",
    "SpecificOffsets",
    "Subscription",
    "Timestamp",
    "TimestampStop",
    "admin_client",
    "audit",
    "commit_offsets",
    "consumer_config",
    "list_partitions",
    "parse_offset_spec",
    "resolve_offsets",
    "resolve_run",
    "timestamp_stops",
]
