"""What ``write_kafka``'s driver reads from the cluster before anything is written: its
brokers and topics (:func:`read_cluster`), whether the target topics exist
(:func:`check_topics_exist`), and the brokers' ``transaction.max.timeout.ms``
(:func:`check_transaction_timeout`). Topics are never created here: the metadata request
names no topic, so that ``auto.create.topics.enable`` cannot create one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from airflow_provider_kafka_spark.errors import KafkaWriteError, WriteConfigError
from airflow_provider_kafka_spark.offsets.cluster import (
    RESULT_MARGIN,
    TOPIC_PROPAGATION_S,
    cluster_metadata,
    wait_for_topics,
)
from airflow_provider_kafka_spark.offsets.config import KafkaConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """What the driver learned from the cluster's metadata."""

    brokers: tuple[int, ...]
    partitions: Mapping[str, int]  # partitions per existing topic


def read_cluster(admin: AdminClient, kafka_config: KafkaConfig,
                 timeout: float) -> Cluster:
    """The cluster's brokers and topics, read on the driver before anything else touches the
    cluster (every topic: a metadata request naming a topic could create it where
    ``auto.create.topics.enable`` is on).

    Raises:
        KafkaWriteError: no broker answered within ``timeout`` seconds.
    """
    try:
        metadata = cluster_metadata(admin, timeout)
    except KafkaException as exc:
        raise KafkaWriteError(
            f"could not reach the Kafka cluster at bootstrap.servers="
            f"{_bootstrap(kafka_config)!r}: no metadata within {timeout:g}s "
            f"({exc.args[0].str()}). Check bootstrap.servers, that the brokers are up and "
            "reachable from the Spark driver, and the client's security settings "
            "(security.protocol, sasl.*, ssl.*); if the cluster is only slow to answer, raise "
            "metadata_timeout_s. Nothing was written."
        ) from None
    # A topic listed with partitions exists, even while its leaders are being elected.
    partitions = {name: len(t.partitions) for name, t in metadata.topics.items()
                  if t.partitions and (t.error is None
                                       or t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART)}
    return Cluster(tuple(sorted(metadata.brokers)), partitions)


def _bootstrap(kafka_config: KafkaConfig) -> str:
    return str(kafka_config.get("bootstrap.servers", ""))


def check_topics_exist(admin: AdminClient, cluster: Cluster,
                       first_index: Mapping[str | None, int | None],
                       kafka_config: KafkaConfig) -> Cluster:
    """Refuse topics the cluster does not have; ``first_index`` maps each topic to the first
    Spark partition index whose rows go to it (``None``: the ``topic=`` argument). A topic
    created a moment ago may take a moment to appear in the brokers' metadata: missing topics
    are looked up again for ``TOPIC_PROPAGATION_S`` seconds. Returns the latest view.

    Raises:
        WriteConfigError: a topic does not exist (or this client may not describe it).
    """
    def absent(view: Cluster) -> list[str]:
        return [t for t in first_index if t is not None and t not in view.partitions]

    cluster = wait_for_topics(cluster, absent, lambda: read_cluster(admin, kafka_config, 30.0),
                              time.monotonic() + TOPIC_PROPAGATION_S)
    missing = sorted((i, t) for t, i in first_index.items()
                     if t is not None and i is not None and t not in cluster.partitions)
    argument = [t for t, i in first_index.items()
                if t is not None and i is None and t not in cluster.partitions]
    if not missing and not argument:
        return cluster
    where = f"on the cluster at bootstrap.servers={_bootstrap(kafka_config)!r}"
    remedy = ("create it first (write_kafka never relies on topic auto-creation), fix the name, "
              "or, if it exists, allow this client to describe it. Nothing was written.")
    if argument:
        raise WriteConfigError(f"topic={argument[0]!r} does not exist {where}: {remedy}")
    named = ", ".join(f"{t!r} (column 'topic', first in Spark partition {i})"
                      for i, t in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    verb = "does" if len(missing) == 1 else "do"
    raise WriteConfigError(f"topic {named}{more} {verb} not exist {where}: {remedy}")


def check_transaction_timeout(admin: AdminClient, cluster: Cluster,
                              transaction_timeout_ms: int, seconds: float) -> None:
    """``transaction_timeout_ms`` is not above any answering broker's
    ``transaction.max.timeout.ms``. A broker that does not answer within ``seconds`` (it just
    died; the cluster has not noticed yet) is left out with a warning, unless none answers.

    Raises:
        WriteConfigError: ``transaction_timeout_ms`` exceeds a broker's
            ``transaction.max.timeout.ms``.
        KafkaWriteError: a broker refused to describe its config, or none answered.
    """
    # One request per broker: librdkafka allows one BROKER resource per describe_configs.
    futures = [future for b in cluster.brokers for future in admin.describe_configs(
        [ConfigResource(ResourceType.BROKER, str(b))], request_timeout=seconds).items()]
    silent: list[str] = []
    for resource, future in futures:
        try:
            configs = future.result(timeout=seconds + RESULT_MARGIN)
        except (KafkaException, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) or exc.args[0].code() in (
                    KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                silent.append(resource.name)
                continue
            raise KafkaWriteError(
                f"could not read the config of broker {resource.name} to check "
                f"transaction_timeout_ms: {exc.args[0].str()}. Check that the brokers are up "
                "and that this client may describe broker configs (DESCRIBE_CONFIGS on the "
                "cluster). Nothing was written."
            ) from None
        entry = configs.get("transaction.max.timeout.ms")
        if entry is not None and entry.value is not None \
                and transaction_timeout_ms > int(entry.value):
            raise WriteConfigError(
                f"transaction_timeout_ms={transaction_timeout_ms} is above broker "
                f"{resource.name}'s transaction.max.timeout.ms={entry.value}; the broker "
                "would reject every transaction (INVALID_TRANSACTION_TIMEOUT). Pass "
                f"transaction_timeout_ms <= {entry.value} or raise transaction.max.timeout.ms."
            )
    if len(silent) == len(futures):
        raise KafkaWriteError(
            f"no broker answered a request for its config within {seconds}s (brokers "
            f"{', '.join(silent)}), needed to check transaction_timeout_ms. Check that the "
            "brokers are up, or raise metadata_timeout_s. Nothing was written.")
    if silent:
        log.warning("brokers %s did not answer within %ss (down?); transaction_timeout_ms was "
                    "checked against the others", ", ".join(silent), seconds)
