"""The Spark read of checked offset ranges, by the engine's source: the package's
``kafka_bounded`` data source (``engine="python"``,
:mod:`~airflow_provider_kafka_spark.spark.read.datasource`) or Spark's own ``kafka`` source
(``engine="spark-kafka"``, numeric ``startingOffsets``/``endingOffsets``). This module gives
each source its options: the offsets, how many of them one Spark task reads, the accumulators
of the counts, and the client's settings, as ``kafka.<key>`` options for both.

``kafka_bounded``'s executors run librdkafka: they get the settings as they are
(:meth:`KafkaConfig.native() <airflow_provider_kafka_spark.offsets.config.KafkaConfig.native>`).
Spark's ``kafka`` source runs Kafka's Java client, which ignores librdkafka's security keys
("supplied but not used"): they are translated, and what cannot be is refused before anything
is read.

========================================  ===================================================
librdkafka                                Java client
========================================  ===================================================
``security.protocol``                     ``security.protocol``
``sasl.mechanism(s)`` PLAIN / SCRAM-*     ``sasl.mechanism`` + ``sasl.jaas.config`` with
 + ``sasl.username``, ``sasl.password``    ``PlainLoginModule`` / ``ScramLoginModule``
``ssl.ca.location``                       ``ssl.truststore.type=PEM``, ``ssl.truststore.location``
``ssl.ca.pem``                            ``ssl.truststore.type=PEM``, ``ssl.truststore.certificates``
``ssl.certificate.location`` +            ``ssl.keystore.type=PEM``, ``ssl.keystore.certificate.chain``
 ``ssl.key.location`` (files read here)    and ``ssl.keystore.key`` (inline PEM, PKCS#8 key)
``ssl.certificate.pem``, ``ssl.key.pem``  the same, inline
``ssl.key.password``                      ``ssl.key.password``
``ssl.keystore.location``/``.password``   ``ssl.keystore.type=PKCS12``, the same keys
``ssl.endpoint.identification.algorithm`` the same (``none`` becomes ``""``)
``fetch.wait.max.ms``                     ``fetch.max.wait.ms`` (the same setting, renamed)
========================================  ===================================================

Settings both clients know by the same name (``fetch.min.bytes``, ``fetch.max.bytes``,
``max.partition.fetch.bytes``, ``client.id``...) are kept as they are.

OAUTHBEARER, GSSAPI and librdkafka-only security settings (``sasl.oauthbearer.*``,
``sasl.kerberos.*``, ``ssl.crl.location``...) are a :class:`ConfigurationError`: use the
default ``engine="python"``, which passes the connection to librdkafka unchanged.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pyspark.accumulators import Accumulator
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_kafka_spark.errors import ConfigurationError, SparkKafkaSourceMissingError
from airflow_provider_kafka_spark.offsets.ranges import OffsetRanges
from airflow_provider_kafka_spark.options import Engine
from airflow_provider_kafka_spark.spark.read.datasource import (
    DECODE_OPTION,
    FORMAT_NAME,
    KAFKA_OPTION_PREFIX,
    LAND_COMPRESSION_OPTION,
    LAND_CONSTANTS_OPTION,
    LAND_FOLDER_OPTION,
    LAND_ON_CORRUPT_OPTION,
    LAND_PARTITION_BY_OPTION,
    LAND_S3_OPTION,
    LAND_SHAPE_OPTION,
    LAND_SPLIT_BY_OPTION,
    LOST_OFFSETS_OPTION,
    PROGRESS_OPTION,
    SPLIT_ENDS_OPTION,
    SUMMARY_OPTION,
    KafkaBoundedDataSource,
    bounded_frame,
)
from airflow_provider_kafka_spark.spark.read.landing import ParquetFolder
from airflow_provider_kafka_spark.spark.read.marking import ReaderDecoding
from airflow_provider_kafka_spark.spark.session import spark_kafka_package

__all__ = ["java_client_settings", "kafka_options", "spark_read"]

SPARK_KAFKA_FORMAT = "kafka"  # Spark's built-in Kafka source
# Settings Spark's kafka source owns or rejects; never forwarded to it.
_SPARK_KAFKA_OWNED = frozenset({
    "group.id", "auto.offset.reset", "enable.auto.commit", "isolation.level",
    "key.deserializer", "value.deserializer", "interceptor.classes",
})


def spark_read(
    spark: SparkSession,
    ranges: OffsetRanges,
    settings: Mapping[str, str],
    *,
    engine: Engine,
    isolation_level: str,
    max_records_per_split: int,
    include_headers: bool,
    on_data_loss: Literal["fail", "skip"],
    poll_timeout: float,
    lost_offsets: Accumulator[Any] | None,
    summaries: Accumulator[Any] | None,
    landing: ParquetFolder | None,
    split_ends: bool = False,
    progress_to: str | None = None,
    decoding: ReaderDecoding | None = None,
) -> DataFrame:
    """The DataFrame of ``ranges`` by the ``engine``'s source, with the client ``settings``
    (the strings of :meth:`KafkaConfig.native()
    <airflow_provider_kafka_spark.offsets.config.KafkaConfig.native>`).

    :func:`~airflow_provider_kafka_spark.spark.read.reader.read_kafka` checked every argument
    and the ranges' starts against the cluster before. Each Spark task reads at most
    ``max_records_per_split`` offsets. Only ``kafka_bounded`` counts (``lost_offsets``: the
    offsets skipped during the read; ``summaries``: each split's counts), lands
    (``landing``), marks each split's end (``split_ends``) and decodes in the readers
    (``decoding``, or the landing's).

    Raises:
        ConfigurationError: ``engine="spark-kafka"`` and settings the Java client has no
            equivalent for (see :func:`java_client_settings`).
        SparkKafkaSourceMissingError: ``engine="spark-kafka"`` without Spark's kafka source.
    """
    if engine == "spark-kafka":
        return _spark_kafka(spark, ranges, settings, isolation_level, max_records_per_split,
                            include_headers, on_data_loss)
    options = {
        "ranges": ranges.to_json(),
        "isolationLevel": isolation_level,
        "maxRecordsPerSplit": str(max_records_per_split),
        "includeHeaders": str(include_headers).lower(),
        "onDataLoss": on_data_loss,
        "pollTimeout": str(poll_timeout),
        **kafka_options(settings),
    }
    if split_ends:
        options[SPLIT_ENDS_OPTION] = "true"
    decoding = landing.decoding if landing is not None else decoding
    if decoding is not None:
        options[DECODE_OPTION] = decoding.to_json()
    if progress_to:
        options[PROGRESS_OPTION] = progress_to
    if landing is not None:
        options[LAND_FOLDER_OPTION] = landing.path
        options[LAND_COMPRESSION_OPTION] = landing.compression
        if landing.constants:
            options[LAND_CONSTANTS_OPTION] = json.dumps(landing.constants)
        if landing.s3 is not None:
            options[LAND_S3_OPTION] = landing.s3.to_json()
        if landing.shape is not None:
            options[LAND_SHAPE_OPTION] = json.dumps(landing.shape.to_json())
        if landing.partition_by:
            options[LAND_PARTITION_BY_OPTION] = json.dumps(list(landing.partition_by))
        if landing.split_by:
            options[LAND_SPLIT_BY_OPTION] = json.dumps([list(s) for s in landing.split_by])
        if landing.decoding is not None:
            options[LAND_ON_CORRUPT_OPTION] = landing.on_corrupt
    if landing is not None or split_ends:
        # Rows only this package reads (the landing's reports; write_kafka's input, whose end
        # rows it strips), never joined: planned here, without the Python data source's own
        # Python processes. A DataFrame a caller may join stays the data source's, whose size
        # Spark does not know (a plan of one row per split would look small enough to
        # broadcast).
        return bounded_frame(spark, options, lost_offsets=lost_offsets, summaries=summaries)
    if lost_offsets is not None:
        options[LOST_OFFSETS_OPTION] = str(lost_offsets.aid)
    if summaries is not None:
        options[SUMMARY_OPTION] = str(summaries.aid)
    _register(spark)
    return spark.read.format(FORMAT_NAME).options(**options).load()


def kafka_options(settings: Mapping[str, str]) -> dict[str, str]:
    """The client's ``settings`` (strings, as :meth:`KafkaConfig.native()
    <airflow_provider_kafka_spark.offsets.config.KafkaConfig.native>` gives them) as a
    source's ``kafka.``-prefixed options."""
    return {KAFKA_OPTION_PREFIX + key: value for key, value in settings.items()}


_REGISTERING = threading.Lock()
_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def _register(spark: Any) -> None:
    """Register the data source with the session once: reads started at once from several
    threads of one session (concurrent ingests) do not race each other, and a later read does
    not register it again (Spark would log a warning that it replaced the source)."""
    with _REGISTERING:
        if spark in _REGISTERED:
            return
        try:
            spark.dataSource.register(KafkaBoundedDataSource)
        except Exception as exc:
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
                raise
        _REGISTERED.add(spark)


def _spark_kafka(spark: SparkSession, ranges: OffsetRanges, settings: Mapping[str, str],
                 isolation_level: str, max_records_per_split: int, include_headers: bool,
                 on_data_loss: str) -> DataFrame:
    """Spark's ``kafka`` source over ``ranges``, with numeric offsets only."""
    client = java_client_settings({k: v for k, v in settings.items()
                                   if k not in _SPARK_KAFKA_OWNED})
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        if r.size == 0:
            continue
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.stop
    reader = (spark.read.format(SPARK_KAFKA_FORMAT)
              .option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(starting))
              .option("endingOffsets", json.dumps(ending))
              .option("kafka.isolation.level", isolation_level)
              .option("includeHeaders", str(include_headers).lower())
              .option("failOnDataLoss", str(on_data_loss == "fail").lower())
              .option("maxRecordsPerPartition", str(max_records_per_split))
              .options(**kafka_options(client)))
    try:
        return reader.load()
    except Exception as exc:
        # Spark answers "kafka" with a dedicated AnalysisException, other names with
        # DATA_SOURCE_NOT_FOUND (through Py4J); anything else is not ours to translate.
        text = str(exc)
        if "DATA_SOURCE_NOT_FOUND" not in text and "Failed to find data source" not in text:
            raise
        raise SparkKafkaSourceMissingError(
            "engine='spark-kafka' needs Spark's kafka source, which is not on this session's "
            f"classpath. Start the session with spark.jars.packages={spark_kafka_package()} "
            "(spark_session(spark_kafka=True) does that), or add the jar with spark.jars; or use "
            "engine='python', which needs no jar."
        ) from None


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka keys handled below; every other sasl.* / ssl.* key cannot be translated.
_TRANSLATED = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location",
    "ssl.certificate.pem", "ssl.key.pem", "ssl.key.password", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
})
# librdkafka names of settings the Java client calls otherwise.
_RENAMED = {"fetch.wait.max.ms": "fetch.max.wait.ms"}
_PYTHON_ENGINE = "use engine='python' (the default), which gives the settings to librdkafka as they are"


def java_client_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (librdkafka) with its security settings in the Java client's terms; other
    settings are kept as they are.

    Raises:
        ConfigurationError: a security setting the Java client has no equivalent for, a SASL
            mechanism other than PLAIN / SCRAM, or a certificate file that cannot be read;
            never showing a secret value.
    """
    untranslatable = sorted(k for k in config if k.startswith(("sasl.", "ssl."))
                            and k not in _TRANSLATED)
    if untranslatable:
        raise ConfigurationError(
            f"engine='spark-kafka' cannot give {', '.join(untranslatable)} to Spark's Java Kafka "
            f"client (no equivalent is translated); {_PYTHON_ENGINE}.")
    java = {_RENAMED.get(k, k): v for k, v in config.items() if k not in _TRANSLATED}
    if "security.protocol" in config:
        java["security.protocol"] = str(config["security.protocol"]).upper()
    java.update(_sasl(config))
    java.update(_tls(config))
    return java


def _sasl(config: Mapping[str, Any]) -> dict[str, str]:
    mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms")
    if mechanism is None and "sasl.username" not in config:
        return {}
    mechanism = str(mechanism or "GSSAPI").upper()
    if mechanism not in _LOGIN_MODULES:
        raise ConfigurationError(
            f"engine='spark-kafka' cannot translate sasl.mechanism={mechanism} for Spark's Java "
            f"Kafka client (only PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512); {_PYTHON_ENGINE}.")
    if "sasl.username" not in config or "sasl.password" not in config:
        raise ConfigurationError(
            f"sasl.mechanism={mechanism} needs sasl.username and sasl.password in the Kafka "
            "connection's extra.")
    username, password = (_quoted(config[k]) for k in ("sasl.username", "sasl.password"))
    return {"sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{_LOGIN_MODULES[mechanism]} required username="{username}" '
                                f'password="{password}";'}


def _quoted(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def _tls(config: Mapping[str, Any]) -> dict[str, str]:
    java: dict[str, str] = {}
    if "ssl.ca.location" in config:
        java.update({"ssl.truststore.type": "PEM",
                     "ssl.truststore.location": str(config["ssl.ca.location"])})
    if "ssl.ca.pem" in config:
        java.update({"ssl.truststore.type": "PEM",
                     "ssl.truststore.certificates": str(config["ssl.ca.pem"])})
    certificate = (_read_pem(config, "ssl.certificate.location")
                   or config.get("ssl.certificate.pem"))
    key = _read_pem(config, "ssl.key.location") or config.get("ssl.key.pem")
    if (certificate is None) != (key is None):
        raise ConfigurationError(
            "a client certificate needs both its certificate (ssl.certificate.location or "
            "ssl.certificate.pem) and its key (ssl.key.location or ssl.key.pem).")
    if certificate is not None:
        java.update({"ssl.keystore.type": "PEM",
                     "ssl.keystore.certificate.chain": str(certificate),
                     "ssl.keystore.key": str(key)})
    if "ssl.keystore.location" in config:
        java.update({"ssl.keystore.type": "PKCS12",
                     "ssl.keystore.location": str(config["ssl.keystore.location"])})
        if "ssl.keystore.password" in config:
            java["ssl.keystore.password"] = str(config["ssl.keystore.password"])
    if "ssl.key.password" in config:
        java["ssl.key.password"] = str(config["ssl.key.password"])
    if "ssl.endpoint.identification.algorithm" in config:
        value = str(config["ssl.endpoint.identification.algorithm"])
        java["ssl.endpoint.identification.algorithm"] = "" if value.lower() == "none" else value
    return java


def _read_pem(config: Mapping[str, Any], key: str) -> str | None:
    """The PEM text of the file ``config[key]`` names (read on the driver: the Java client
    takes the client certificate and key inline, so executors need no copy of the files)."""
    if key not in config:
        return None
    try:
        return Path(str(config[key])).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not PEM text"
        raise ConfigurationError(
            f"engine='spark-kafka' reads {key}={str(config[key])!r} on the driver to give it to "
            f"Spark's Java Kafka client, and could not: {reason}. Fix the path."
        ) from None
