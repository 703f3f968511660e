"""Can a retry help? One reading of a failure's causes, for every place where an engine's, a
store's or a client's exception becomes one of the package's errors (:mod:`.errors`).

:func:`classify` reads the whole cause chain: Python's ``__cause__`` / ``__context__``, each
exception's class and text, and so the Java exceptions a ``Py4JJavaError``, a captured
``AnalysisException`` or a Spark Connect error quote (their class names, ``Caused by:``
lines, S3A's and the AWS SDK's ``Status Code`` / ``Error Code``), a botocore ``ClientError``'s
code and HTTP status, and a ``KafkaException``'s error (its name, ``retriable()``). The
first rule group that matches decides, in this order:

1. **a concurrent writer** (retryable): a ``FileNotFoundException`` under a ``_temporary``
   folder (another Spark job of the same folder committed and removed it), S3A's
   ``RemoteFileChangedException``, Delta's and Iceberg's concurrent-commit exceptions;
2. **certain, a retry cannot change it** (not retryable): a class or data source the session
   cannot load, credentials or access refused, a missing bucket or topic, a file where a
   folder should be;
3. **transient** (retryable): throttling (``503``, ``SlowDown``, ``429``), a server error
   (``500``, ``502``, ``504``), a timeout, a connection refused or reset, a catalog's
   database away (``SQLTransientException``, a ``PSQLException`` about the connection,
   Thrift's ``TTransportException``), then any other I/O error (``java.io.IOException`` and
   its kind, Python's ``OSError``);
4. **certain, a bad argument** (not retryable): Spark's analysis and parse errors, an illegal
   or unsupported argument, a missing table, namespace or column, Python's ``ValueError``,
   ``TypeError``, ``KeyError``..., a Spark error whose SQLSTATE is of the classes 42 (syntax or
   analysis), 0A (not supported) or 22 (data);
5. anything else: ``otherwise`` (retryable unless the caller knows better, e.g. a user's
   function run on an empty DataFrame, which fails the same way every time).

An I/O error below an analysis error (a metastore that did not answer, reported as an
``AnalysisException``) is therefore transient, and a missing class below an I/O error
(``IOException: ... ClassNotFoundException``) certain.

No Spark, Airflow or Kafka import: every layer may use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from airflow_provider_kafka_spark.errors import KafkaSparkError, cut


@dataclass(frozen=True)
class Cause:
    """What :func:`classify` found: whether a retry can help, the kind of cause, and the mark
    that told (a class name, a status code, a phrase of the message)."""

    retryable: bool
    kind: str
    """``concurrent writer``, ``missing class``, ``refused``, ``missing``, ``path in the way``,
    ``throttled``,
    ``server error``, ``timeout``, ``connection``, ``database``, ``I/O error``, ``bad
    argument``, ``client`` (a Kafka client's own verdict), ``package error`` (one of this
    package's errors, by its class) or ``unknown``."""
    mark: str
    """What told, e.g. ``java.net.SocketTimeoutException`` or ``Status Code: 503``."""

    @property
    def known(self) -> bool:
        """Whether a rule recognised the cause (else the caller's ``otherwise`` decided)."""
        return self.kind != "unknown"

    def says(self) -> str:
        """A sentence for an error message: the cause and whether a retry can help."""
        what = _SAID.get(self.kind, self.kind)
        if not self.known:
            return ("The cause is not one known to be permanent, so a retry may help "
                    "(Airflow's retries go on)." if self.retryable else
                    "The cause is not one known to be transient: a retry would fail the same way.")
        if self.retryable:
            return f"The cause is {what} ({self.mark}): a retry may help."
        return f"The cause is {what} ({self.mark}): a retry cannot help."


_SAID = {
    "concurrent writer": "another writer of the same output at the same time",
    "missing class": "a class or data source the session cannot load",
    "refused": "credentials or access refused",
    "missing": "a bucket, topic or store that does not exist",
    "path in the way": "a file where a folder should be (or a folder where a file should be)",
    "throttled": "throttling by the server",
    "server error": "a server error",
    "timeout": "a timeout",
    "connection": "a connection refused, reset or lost",
    "database": "a catalog's or metastore's database that did not answer",
    "I/O error": "an I/O error",
    "bad argument": "an argument, option, table or column the engine refuses",
    "client": "the client's own verdict",
    "package error": "an error of this package",
}

_RULES: tuple[tuple[str, bool, tuple[str, ...]], ...] = (
    ("concurrent writer", True, (
        r"FileNotFoundException[^\n]*/_temporary\b", r"RemoteFileChangedException",
        r"ConcurrentAppendException", r"ConcurrentDeleteReadException",
        r"ConcurrentDeleteDeleteException", r"ConcurrentTransactionException",
        r"MetadataChangedException", r"ProtocolChangedException",
        r"iceberg\.exceptions\.CommitFailedException", r"PublishConflictError")),
    ("missing class", False, (
        r"ClassNotFoundException", r"NoClassDefFoundError", r"DATA_SOURCE_NOT_FOUND",
        r"Failed to find data source", r"No FileSystem for scheme",
        r"UnsupportedFileSystemException", r"CATALOG_PLUGIN_CLASS_NOT_FOUND",
        r"ModuleNotFoundError")),
    ("refused", False, (
        r"AccessDeniedException", r"\bAccessDenied\b", r"\bAllAccessDisabled\b",
        r"InvalidAccessKeyId", r"SignatureDoesNotMatch", r"\bExpiredToken\b", r"\bInvalidToken\b",
        r"Status Code: 403\b", r"\b403 Forbidden\b", r"NoAuthWithAWSException",
        r"Unable to load (AWS )?credentials", r"NoCredentialsError", r"PartialCredentialsError",
        r"AccessControlException", r"Permission denied", r"PermissionError",
        r"password authentication failed", r"SQLInvalidAuthorizationSpecException",
        r"SASL_AUTHENTICATION_FAILED", r"_AUTHENTICATION\b", r"\w+_AUTHORIZATION_FAILED",
        r"certificate verify failed", r"SSL alert number \d+",
        r"\balert (bad|unknown|certificate|handshake|access|protocol|decrypt|illegal|unsupported)",
        r"connecting to a PLAINTEXT broker listener")),
    ("missing", False, (
        r"NoSuchBucket", r"UnknownStoreException", r"Bucket \S+ does not exist",
        r"UNKNOWN_TOPIC_OR_PART", r"_UNKNOWN_TOPIC\b", r"_UNKNOWN_PARTITION\b")),
    ("path in the way", False, (
        r"ParentNotDirectoryException", r"Parent path is not a directory",
        r"NotADirectoryError", r"IsADirectoryError", r"\bNot a directory\b",
        r"\bIs a directory\b")),
    ("throttled", True, (
        r"AWSServiceThrottledException", r"\bSlowDown\b", r"Status Code: (503|429)\b",
        r"\b503 Service Unavailable\b", r"\bServiceUnavailable\b", r"\bThrottl(ed|ing)",
        r"TooManyRequests", r"RequestLimitExceeded", r"\bRequest rate\b")),
    ("server error", True, (
        r"AWSStatus500Exception", r"Status Code: 5\d\d\b", r"\bInternalError\b",
        r"\b50[0234] (Internal Server Error|Bad Gateway|Gateway Timeout)\b")),
    ("timeout", True, (
        r"SocketTimeoutException", r"ConnectTimeoutException", r"ConnectTimeoutError",
        r"ReadTimeoutError", r"ApiCallTimeoutException", r"ApiCallAttemptTimeoutException",
        r"java\.util\.concurrent\.TimeoutException", r"\bTimeoutError\b", r"\btimed out\b",
        r"\bRequestTimeout\b", r"\b_TIMED_OUT\b", r"\bREQUEST_TIMED_OUT\b")),
    ("connection", True, (
        r"java\.net\.ConnectException", r"ConnectException", r"Connection refused",
        r"Connection reset", r"SocketException", r"Broken pipe", r"BrokenPipeError",
        r"ConnectionResetError", r"ConnectionRefusedError", r"ConnectionAbortedError",
        r"ConnectionError", r"UnknownHostException", r"NoRouteToHostException",
        r"NoHttpResponseException", r"EndpointConnectionError", r"ConnectionClosedError",
        r"Unable to execute HTTP request", r"AWSClientIOException", r"AWSNoResponseException",
        r"Remote end closed connection", r"unexpected end of stream",
        r"Premature end of Content-Length", r"unexpected eof",
        r"\b_TRANSPORT\b", r"\b_ALL_BROKERS_DOWN\b",
        r"Py4JNetworkError")),
    ("database", True, (
        r"SQLTransient\w*Exception", r"SQLRecoverableException",
        r"SQLNonTransientConnectionException", r"CommunicationsException",
        r"PSQLException: (Connection to|The connection attempt failed|This connection has been "
        r"closed|An I/O error occurred|FATAL: the database system is (starting up|shutting down)"
        r"|FATAL: terminating connection)",
        r"TTransportException", r"Could not connect to meta ?store",
        r"Failed to start database", r"SQLSTATE[:= ]+08\w{3}")),
    ("I/O error", True, (
        r"java\.io\.\w*IOException", r"java\.io\.FileNotFoundException",
        r"java\.io\.EOFException", r"UncheckedIOException", r"\bIOException\b",
        r"\bOSError\b", r"\bIOError\b", r"FileNotFoundError")),
    ("bad argument", False, (
        r"AnalysisException", r"ParseException", r"IllegalArgumentException",
        r"UnsupportedOperationException", r"NumberFormatException", r"SQLSyntaxErrorException",
        r"SQLDataException", r"AWSBadRequestException", r"Status Code: 400\b",
        r"TABLE_OR_VIEW_NOT_FOUND", r"SCHEMA_NOT_FOUND", r"UNRESOLVED_COLUMN",
        r"PATH_NOT_FOUND", r"Path does not exist", r"NoSuchTableException",
        r"NoSuchNamespaceException", r"DELTA_MISSING_DELTA_TABLE", r"is not a Delta table",
        r"iceberg\.exceptions\.ValidationException", r"\bValueError\b", r"\bTypeError\b",
        r"\bKeyError\b", r"\bIndexError\b", r"\bAttributeError\b", r"\bNameError\b",
        r"\bImportError\b", r"\bNotImplementedError\b", r"\bAssertionError\b",
        r"\bZeroDivisionError\b", r"\bUnicode\w*Error\b", r"\bRecursionError\b",
        r"_INVALID_ARG\b", r"INVALID_CONFIG\b", r"\bPySpark\w+Error\b",
        r"SQLSTATE: (42|0A|22)\w{3}\b")),
)
_COMPILED = tuple((kind, retryable, re.compile("|".join(f"(?:{m})" for m in marks)))
                  for kind, retryable, marks in _RULES)
_FRAME = re.compile(r"^\s*(at [\w$.<>/]+\(|\.\.\. \d+ more|File \")")


def classify(exc: BaseException, *, otherwise: bool = True) -> Cause:
    """Whether a retry can help with ``exc``, from its whole cause chain (see the module).

    ``otherwise``: the verdict when no rule matches (True: only causes known to be permanent
    end a task; False where the failure is known to be deterministic, e.g. a user's function
    on an empty DataFrame).

    ``exc`` itself an error of this package: its class decides (:attr:`retryable`); one deeper
    in the chain decides when no rule matches.
    """
    if isinstance(exc, KafkaSparkError):
        return Cause(type(exc).retryable, "package error", type(exc).__name__)
    own: KafkaSparkError | None = None
    kafka_verdict: bool | None = None
    texts = []
    for item in _chain(exc):
        if isinstance(item, KafkaSparkError) and own is None:
            own = item
        error: Any = item.args[0] if item.args else None
        if kafka_verdict is None and callable(getattr(error, "retriable", None)) and \
                callable(getattr(error, "name", None)):  # a confluent_kafka KafkaError
            texts.append(f"{error.name()}: {error.str()}")
            kafka_verdict = bool(error.retriable())
        texts.append(_described(item))
    cause = classify_text("\n".join(texts), otherwise=otherwise)
    if cause.known:
        return cause
    if kafka_verdict is not None:
        return Cause(kafka_verdict, "client", "KafkaError.retriable()")
    if own is not None:
        return Cause(type(own).retryable, "package error", type(own).__name__)
    return cause


def classify_text(text: str, *, otherwise: bool = True) -> Cause:
    """:func:`classify` for the text of a failure alone (a Spark Connect error's message, a
    librdkafka error string, a task's traceback); stack frames are skipped."""
    lines = "\n".join(line for line in text.splitlines() if not _FRAME.match(line))
    for kind, retryable, pattern in _COMPILED:
        found = pattern.search(lines)
        if found:
            return Cause(retryable, kind, cut(found.group(0), 80))
    return Cause(otherwise, "unknown", "")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then its causes (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    item: BaseException | None = exc
    while item is not None and id(item) not in seen:
        seen.add(id(item))
        yield item
        item = item.__cause__ or item.__context__


def _described(exc: BaseException) -> str:
    """The class and text of ``exc``: a ``Py4JJavaError``'s Java exception with its causes
    (its ``str()``), a botocore ``ClientError``'s code and HTTP status too."""
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    try:
        text = str(exc)
    except Exception:  # a Py4JJavaError whose gateway is gone: its class says what it can
        text = ""
    response = getattr(exc, "response", None)
    extra = ""
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        extra = f" (Error Code: {code}; Status Code: {status})"
    return f"{name}: {text}{extra}"
