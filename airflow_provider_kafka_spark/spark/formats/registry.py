"""Schema Registry access: the client config, the one client per process, and reader/writer
schemas resolved on the driver.

``schema_registry`` configs are confluent-kafka's ``SchemaRegistryClient`` configs (``url``,
``basic.auth.user.info``, ``bearer.auth.*``, ``ssl.*``, ``timeout``...), the same way
``kafka_config`` is librdkafka's. Every registry failure becomes :class:`SchemaRegistryError`
with the URL (never the credentials) and what to do.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError as _ClientError
from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from airflow_provider_kafka_spark.errors import DecodeError, SchemaRegistryError
from airflow_provider_kafka_spark.offsets.specs import shown

RegistryFormat = Literal["avro", "protobuf", "json_schema"]
# The schema types of the registry's REST API, by format.
SCHEMA_TYPES: dict[str, str] = {"avro": "AVRO", "protobuf": "PROTOBUF",
                                "json_schema": "JSON"}
# The registry's error code for an unknown schema id / guid.
UNKNOWN_SCHEMA = 40403

T = TypeVar("T")


@dataclass(frozen=True)
class Subject:
    """A schema registered under the subject ``name``: its ``version`` (a number, or
    ``"latest"``, the subject's newest version when the job starts)."""

    name: str
    version: int | Literal["latest"] = "latest"


@dataclass(frozen=True)
class ResolvedSchema:
    """A schema fixed on the driver for one job: what the executors decode into or encode with.

    Attributes:
        format: ``avro``, ``protobuf`` or ``json_schema``.
        schema_str: the schema's text (Avro/JSON Schema JSON; Protobuf: a base64
            ``FileDescriptorProto``).
        imports: (Protobuf) the registered schema of each imported file that is not one of
            Google's well-known types.
        schema_id: the registry's id of the schema, when it is registered.
        subject, version: where it was found, when it came from a subject.
        message: (Protobuf) the full name of the message; its file's first message if None.
    """

    format: str
    schema_str: str
    imports: tuple[tuple[str, str], ...] = ()
    schema_id: int | None = None
    subject: str | None = None
    version: int | None = None
    message: str | None = None


def frozen_config(config: Mapping[str, Any] | None, what: str) -> tuple[tuple[str, Any], ...]:
    """``config`` checked (a mapping with ``url``, a config the client accepts) and frozen, so
    that it can travel to executors and key their per-process client."""
    if not isinstance(config, Mapping) or not config.get("url"):
        raise DecodeError(f"{what} needs schema_registry={{'url': 'http://host:8081', ...}} "
                          f"(confluent-kafka's SchemaRegistryClient config), got "
                          f"{shown(_masked(config))}.")
    frozen = tuple(sorted((str(k), v) for k, v in config.items()))
    try:
        registry_client(frozen)
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"schema_registry is not a valid SchemaRegistryClient config: {exc}. "
                          "Use its keys: url, basic.auth.user.info, bearer.auth.*, ssl.*, "
                          "timeout.") from None
    return frozen


def _masked(config: Any) -> Any:
    if not isinstance(config, Mapping):
        return config
    return {k: "***" if any(s in str(k) for s in ("auth", "password", "token", "secret"))
            else v for k, v in config.items()}


_CLIENTS: dict[tuple[tuple[str, Any], ...], SchemaRegistryClient] = {}


def registry_client(config: tuple[tuple[str, Any], ...]) -> SchemaRegistryClient:
    """The process's one client for ``config``: schemas are fetched once per id per process
    (the client caches them)."""
    client = _CLIENTS.get(config)
    if client is None:
        client = _CLIENTS[config] = SchemaRegistryClient(dict(config))
    return client


def url_of(config: tuple[tuple[str, Any], ...]) -> str:
    """The registry URL of ``config``, without any user info."""
    url = str(dict(config).get("url", ""))
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if rest else url


def registry_call(config: tuple[tuple[str, Any], ...], doing: str, call: Callable[[], T]) -> T:
    """``call()``, with the client's failures raised as :class:`SchemaRegistryError` saying
    what was being done, against which registry, and what to do."""
    try:
        return call()
    except _ClientError as exc:
        raise SchemaRegistryError(
            f"the Schema Registry at {url_of(config)} refused {doing}: {exc.error_message} "
            f"(HTTP {exc.http_status_code}, code {exc.error_code}). "
            + _advice(exc.http_status_code)) from None
    except OSError as exc:
        raise unreachable(config, doing, exc) from None
    except Exception as exc:
        if is_transport_error(exc):
            raise unreachable(config, doing, exc) from None
        raise


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the HTTP client's failure to reach the registry (not an answer)."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in ("httpx", "httpx2",
                                                                                 "httpcore")


def unreachable(config: tuple[tuple[str, Any], ...], doing: str,
                exc: BaseException) -> SchemaRegistryError:
    return SchemaRegistryError(
        f"the Schema Registry at {url_of(config)} could not be reached for {doing}: "
        f"{type(exc).__name__}: {exc}. Check that it runs and the url; re-run the job (nothing "
        "was committed).")


def _advice(status: int) -> str:
    if status in (401, 403):
        return "Check the credentials (basic.auth.user.info, bearer.auth.*) of the connection."
    if status == 404:
        return "Check the subject and version, or register the schema first."
    if status == 409:
        return ("The schema is incompatible with the subject's compatibility level; evolve it "
                "compatibly, or register it under a new subject.")
    return "Check the registry's log; re-run the job when it answers."


def resolve_schema(config: tuple[tuple[str, Any], ...], fmt: str,
                   schema: str | Subject | type[Message]) -> ResolvedSchema:
    """The reader (or writer) schema of a job, on the driver: a :class:`Subject` is looked up
    once (its ``latest`` version fixed for the whole job); inline text is parsed and checked;
    a Protobuf message class gives its file's descriptor."""
    if isinstance(schema, Subject):
        return _from_subject(config, fmt, schema)
    if fmt == "protobuf":
        if isinstance(schema, type) and issubclass(schema, Message):
            file = schema.DESCRIPTOR.file
            imports = tuple(sorted({d.name: _serialized(d) for d in _dependencies(file)
                                    if not d.name.startswith("google/protobuf/")}.items()))
            return ResolvedSchema(fmt, _serialized(file), imports,
                                  message=schema.DESCRIPTOR.full_name)
        raise DecodeError(f"a Protobuf schema is a Subject(...) or a generated message class, "
                          f"not {shown(schema)}.")
    if not isinstance(schema, str):
        raise DecodeError(f"an inline {fmt} schema is JSON text, not {shown(schema)}; or pass "
                          "Subject('name', version).")
    try:
        json.loads(schema)
    except ValueError as exc:
        raise DecodeError(f"the inline {fmt} schema is not JSON: {exc}.") from None
    return ResolvedSchema(fmt, schema)


def _from_subject(config: tuple[tuple[str, Any], ...], fmt: str,
                  subject: Subject) -> ResolvedSchema:
    if not isinstance(subject.name, str) or not subject.name:
        raise DecodeError(f"Subject name {shown(subject.name)} must be a non-empty string.")
    if subject.version != "latest" and (not isinstance(subject.version, int)
                                        or isinstance(subject.version, bool)
                                        or subject.version < 1):
        raise DecodeError(f"Subject version {shown(subject.version)} must be 'latest' or a "
                          "version number >= 1.")
    client = registry_client(config)
    fmt_arg = "serialized" if fmt == "protobuf" else None
    doing = f"the {subject.version} version of the subject {subject.name!r}"
    if subject.version == "latest":
        found = registry_call(config, doing,
                              lambda: client.get_latest_version(subject.name, fmt=fmt_arg))
    else:
        version = subject.version
        found = registry_call(config, doing,
                              lambda: client.get_version(subject.name, version, fmt=fmt_arg))
    registered = found.schema
    if (registered.schema_type or "AVRO") != SCHEMA_TYPES[fmt]:
        raise DecodeError(f"the subject {subject.name!r} holds a {registered.schema_type} "
                          f"schema, not {SCHEMA_TYPES[fmt]}; use its format, or another "
                          "subject.")
    imports = _imports(config, registered.references or []) if fmt == "protobuf" else ()
    return ResolvedSchema(fmt, str(registered.schema_str), imports, found.schema_id,
                          subject.name, found.version)


def _imports(config: tuple[tuple[str, Any], ...], references: list[Any]) -> \
        tuple[tuple[str, str], ...]:
    client = registry_client(config)
    found: dict[str, str] = {}
    pending = list(references)
    while pending:
        ref = pending.pop()
        if ref.name in found:
            continue
        version = registry_call(
            config, f"the reference {ref.name!r} ({ref.subject} v{ref.version})",
            partial(client.get_version, ref.subject, ref.version, fmt="serialized"))
        found[ref.name] = str(version.schema.schema_str)
        pending.extend(version.schema.references or [])
    return tuple(sorted(found.items()))


def _dependencies(file: Any) -> list[Any]:
    found = []
    for dependency in file.dependencies:
        found += [dependency, *_dependencies(dependency)]
    return found


def _serialized(file: Any) -> str:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return base64.b64encode(proto.SerializeToString()).decode("ascii")
