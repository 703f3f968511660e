"""S3 as this package reaches it, without Spark and without Airflow: where a bucket is and with
which credentials (:class:`S3Settings`), the clients that act on it (boto3 for the control
calls: listings, conditional PUTs, deletes, multipart uploads; pyarrow's ``S3FileSystem`` for
the data objects), and what an S3 error means (:func:`store_error`).

:class:`S3Settings` comes from where users keep them: Spark's own ``fs.s3a.*`` settings
(:meth:`S3Settings.from_hadoop`, per bucket as S3A reads them), or an Airflow ``aws``
connection (``hooks.AwsConnection``). Values left out (no keys, no region) fall to the AWS
SDKs' default chains (environment, profile, instance role), as S3A's do. The secret key and
session token never appear in a ``repr``, a log line, a manifest or an error.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError, error_line

S3_SCHEMES = ("s3a", "s3", "s3n")
"""The URI schemes of S3 (``s3a:`` is Hadoop's S3A, ``s3:`` how the rest of the world says it)."""

CONNECT_TIMEOUT_S = 5.0
"""How long a client waits to connect to the endpoint, per attempt."""
READ_TIMEOUT_S = 60.0
"""How long a client waits for an answer, per attempt."""
ATTEMPTS = 3
"""How many times a failed call is tried again (boto3's ``max_attempts`` of its standard
retries: throttling, 5xx, resets; a call is sent at most 4 times)."""


def is_s3(uri: str) -> bool:
    """Whether ``uri`` names an object in S3 (``s3a://``, ``s3://``, ``s3n://``)."""
    return urlsplit(uri).scheme.lower() in S3_SCHEMES


def split_s3(uri: str) -> tuple[str, str]:
    """``s3a://bucket/a/b/`` -> ``("bucket", "a/b")``.

    Raises:
        ConfigurationError: not an S3 URI, or no bucket in it.
    """
    parts = urlsplit(uri)
    if parts.scheme.lower() not in S3_SCHEMES or not parts.netloc:
        raise ConfigurationError(f"{uri!r} is not an S3 location; pass 's3a://<bucket>/<key>'.")
    return parts.netloc, parts.path.strip("/")


_HADOOP_KEYS = {  # S3Settings field -> the fs.s3a.* key S3A reads it from
    "endpoint_url": "endpoint",
    "region": "endpoint.region",
    "access_key": "access.key",
    "secret_key": "secret.key",
    "session_token": "session.token",
    "path_style": "path.style.access",
    "ssl": "connection.ssl.enabled",
}


@dataclass(frozen=True)
class S3Settings:
    """Where S3 is and how to sign in; every field optional.

    :param endpoint_url: ``http(s)://host:port`` of an S3-compatible server, or None for AWS
        (a bare ``host:port`` is taken with :attr:`ssl`'s scheme, as S3A does).
    :param region: the signing region; None: the SDK's default chain, else ``us-east-1``.
    :param access_key: the access key id; None: the SDK's default credential chain.
    :param secret_key: its secret (never shown).
    :param session_token: a session token of temporary credentials (never shown).
    :param path_style: address buckets as ``endpoint/bucket`` (most local servers need it).
    :param ssl: ``https`` for a bare ``host:port`` endpoint.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    path_style: bool = False
    ssl: bool = True

    def __post_init__(self) -> None:
        for name in ("endpoint_url", "region", "access_key", "secret_key", "session_token"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                shown = "<hidden>" if name in ("secret_key", "session_token") else repr(value)
                raise ConfigurationError(f"S3Settings {name}={shown} is not valid; pass a "
                                         "non-empty string or None (the SDK's default).")
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigurationError("S3Settings needs both access_key and secret_key, or "
                                     "neither (then the SDK's default credential chain).")

    def __repr__(self) -> str:
        key = None if self.access_key is None else f"{self.access_key[:4]}..."
        return (f"S3Settings(endpoint_url={self.endpoint_url!r}, region={self.region!r}, "
                f"access_key={key!r}, path_style={self.path_style})")

    @classmethod
    def from_hadoop(cls, get: Callable[[str], str | None], bucket: str) -> S3Settings:
        """The settings S3A uses for ``bucket``, read with ``get(key)`` from a Hadoop
        configuration (``fs.s3a.bucket.<bucket>.<option>`` over ``fs.s3a.<option>``)."""
        found: dict[str, Any] = {}
        for name, option in _HADOOP_KEYS.items():
            value = get(f"fs.s3a.bucket.{bucket}.{option}") or get(f"fs.s3a.{option}")
            if value is not None and str(value).strip():
                found[name] = str(value).strip()
        for flag in ("path_style", "ssl"):
            if flag in found:
                found[flag] = found[flag].lower() == "true"
        return cls(**found)

    def hadoop_options(self, bucket: str) -> dict[str, str]:
        """These settings as S3A's per-bucket options (``fs.s3a.bucket.<bucket>.*``), for a
        Spark session that must reach ``bucket`` the same way."""
        options = {}
        for name, option in _HADOOP_KEYS.items():
            value = getattr(self, name)
            if value is not None:
                options[f"fs.s3a.bucket.{bucket}.{option}"] = (
                    str(value).lower() if isinstance(value, bool) else str(value))
        if self.access_key is not None:
            options[f"fs.s3a.bucket.{bucket}.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                if self.session_token else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
        return options

    def to_json(self) -> str:
        """For the readers (executors): the settings as JSON, secret included. Pass it only
        where Spark redacts it (an option whose name holds ``secret``)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> S3Settings:
        return cls(**json.loads(text))

    def _endpoint(self) -> str | None:
        if self.endpoint_url is None:
            return None
        if "://" in self.endpoint_url:
            return self.endpoint_url
        return f"{'https' if self.ssl else 'http'}://{self.endpoint_url}"

    def client(self) -> Any:
        """A boto3 S3 client with these settings (timeouts :data:`CONNECT_TIMEOUT_S`,
        :data:`READ_TIMEOUT_S`, :data:`ATTEMPTS` retries), one per process and settings
        (a new client costs about 0.1 CPU-s, mostly botocore reading its service model;
        boto3's clients are thread-safe).

        Raises:
            ConfigurationError: boto3 is not installed (the ``s3`` extra).
        """
        with _CLIENTS_LOCK:
            if self not in _CLIENTS:
                _CLIENTS[self] = self._new_client()
            return _CLIENTS[self]

    def _new_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise ConfigurationError(
                "landing on S3 needs boto3 (the file sink publishes each run with a "
                "conditional PUT): pip install 'airflow-provider-kafka-spark[s3]'.") from exc
        # Checksums only where the API requires them, as S3A does: boto3's default since 1.36
        # (a CRC32 of every upload, sent in headers and trailers) costs about 0.5 CPU ms per
        # MB in the readers and is refused by some S3-compatible stores.
        config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                        retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                        s3={"addressing_style": "path" if self.path_style else "auto"},
                        request_checksum_calculation="when_required",
                        response_checksum_validation="when_required")
        return boto3.session.Session().client(
            "s3", endpoint_url=self._endpoint(), region_name=self.region or _default_region(),
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token, config=config)

    def object_store_options(self) -> dict[str, str]:
        """These settings as the ``AWS_*`` options of Rust's ``object_store`` (delta-rs's
        ``storage_options``): path-style requests to an endpoint given (as :meth:`filesystem`),
        plain HTTP allowed for an ``http://`` one; the secret is in the result."""
        endpoint = self._endpoint()
        options = {"AWS_REGION": self.region or _default_region()}
        if endpoint is not None:
            options["AWS_ENDPOINT_URL"] = endpoint
            options["AWS_ALLOW_HTTP"] = str(endpoint.lower().startswith("http://")).lower()
        elif not self.path_style:  # AWS: buckets by their host name, as S3A's default
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "true"
        for key, value in (("AWS_ACCESS_KEY_ID", self.access_key),
                           ("AWS_SECRET_ACCESS_KEY", self.secret_key),
                           ("AWS_SESSION_TOKEN", self.session_token)):
            if value is not None:
                options[key] = value
        return options

    def filesystem(self) -> Any:
        """pyarrow's ``S3FileSystem`` with these settings (the data objects: multipart
        uploads for large ones, aborted when a write fails)."""
        from pyarrow import fs

        endpoint = self._endpoint()
        options: dict[str, Any] = {
            "access_key": self.access_key, "secret_key": self.secret_key,
            "session_token": self.session_token,
            "region": self.region or _default_region(),
            "connect_timeout": CONNECT_TIMEOUT_S, "request_timeout": READ_TIMEOUT_S,
            "force_virtual_addressing": False,
        }
        if endpoint is not None:
            parts = urlsplit(endpoint)
            options.update(endpoint_override=parts.netloc, scheme=parts.scheme)
        return fs.S3FileSystem(**{k: v for k, v in options.items() if v is not None})


_CLIENTS: dict[S3Settings, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _default_region() -> str:
    import os

    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def settings_of_spark(spark: Any, bucket: str) -> S3Settings:
    """The S3A settings of ``spark`` for ``bucket``: the driver's Hadoop configuration on a
    classic session as Spark's writer sees it (``spark.hadoop.fs.s3a.*``, and ``fs.s3a.*`` set on
    the session since), the session's
    ``spark.hadoop.fs.s3a.*`` (and ``fs.s3a.*``) values over Spark Connect."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is not None:  # the configuration Spark's writer uses (runtime settings too)
        hadoop = jsession.sessionState().newHadoopConf()
        return S3Settings.from_hadoop(hadoop.get, bucket)

    def get(key: str) -> str | None:
        for name in (key, f"spark.hadoop.{key}"):
            try:
                value = spark.conf.get(name, None)
            except Exception:  # noqa: BLE001  # a key the server does not know: not set
                value = None
            if value is not None:
                return str(value)
        return None

    return S3Settings.from_hadoop(get, bucket)


# -- what S3's answers mean ----------------------------------------------------------------

_CERTAIN = {  # an error code -> what it means; a retry cannot help
    "InvalidAccessKeyId": "the access key is not known to the store",
    "SignatureDoesNotMatch": "the secret key does not match the access key",
    "InvalidToken": "the session token is not valid",
    "ExpiredToken": "the session token has expired",
    "NoSuchBucket": "the bucket does not exist",
    "AccessDenied": "access is denied",
    "AllAccessDisabled": "access is denied",
    "403": "access is denied (or the keys are wrong)",
    "404": "the bucket does not exist",
    "PermanentRedirect": "the bucket is in another region (set the region or endpoint)",
    "AuthorizationHeaderMalformed": "the region is wrong for this bucket",
}


def error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (e.g. ``PreconditionFailed``)."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        code = response.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


def store_error(exc: BaseException, doing: str, where: str, *,
                hint: str = "Nothing was read or written.") -> ConfigurationError | SinkError:
    """What ``exc`` (raised while ``doing`` at ``where``) means for a user: a
    :class:`ConfigurationError` when a retry cannot help (wrong or no keys, a missing bucket,
    a denied call, a wrong region), else a :class:`SinkError` (the endpoint unreachable, a
    timeout, a server error). The message never holds a secret."""
    code = error_code(exc)
    if code in _CERTAIN:
        return ConfigurationError(
            f"S3 refused to {doing} {where}: {_CERTAIN[code]} ({code}). Check the bucket, the "
            "credentials and their permissions (the session's fs.s3a.* settings, or the "
            f"connection's), then run again. {hint}")
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return ConfigurationError(
            f"could not {doing} {where}: no credentials ({name}): the S3 settings name no "
            "access key and the AWS SDK's default chain of this process found none. Pass "
            "S3Settings with the keys (FileSink(s3=...)) or an Airflow aws connection "
            "(s3=hooks.AwsConnection('aws_default')), or give this process credentials the "
            "SDK finds. Over Spark Connect the session's S3A keys (fs.s3a.*access.key, "
            f"secret.key) cannot be read back: the server redacts them. {hint}")
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError",
                "ReadTimeoutError") or isinstance(exc, OSError):
        return SinkError(f"could not {doing} {where}: the S3 endpoint did not answer "
                         f"({name}: {error_line(exc, 200)}). Check the endpoint and that the "
                         f"store is up; a retry may succeed. {hint}")
    return SinkError(f"could not {doing} {where}: {error_line(exc, 300)}. {hint}")


PART_BYTES = 16 * 1024 * 1024
"""The size of each part of a multipart upload (S3's minimum is 5 MiB, its maximum 10,000
parts: objects up to about 156 GiB)."""


class ObjectUpload:
    """A file-like object that uploads what is written to it as one S3 object, which appears
    at ``key`` **complete or not at all**: a multipart upload (parts of :data:`PART_BYTES`)
    completed by :meth:`finish`, aborted by :meth:`cancel`; an object smaller than a part is
    one PUT at :meth:`finish`. A process killed in between leaves an unfinished multipart
    upload, invisible to readers (the file sink's next publish aborts it).

    pyarrow's own S3 output stream completes the upload when it is closed, even after an
    error: a failed write would replace an object with a partial one. Hence this class.

    A call the store refuses or does not answer raises the package's error (:func:`store_error`:
    :class:`ConfigurationError` or :class:`SinkError`), which a reader task's failure carries
    back to the driver (``errors.kafka_errors``)."""

    def __init__(self, client: Any, bucket: str, key: str, part_bytes: int = PART_BYTES) -> None:
        self._client, self.bucket, self.key = client, bucket, key
        self._part_bytes = part_bytes
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self.size = 0
        self.closed = False

    # the file-like surface pyarrow's writers use
    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        """Closing does not publish (see :meth:`finish`); pyarrow's writer closes its sink."""

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._buffer += view
        self.size += len(view)
        while len(self._buffer) >= self._part_bytes:
            self._upload_part(bytes(self._buffer[:self._part_bytes]))
            del self._buffer[:self._part_bytes]
        return len(view)

    def _store(self, call: str, **arguments: Any) -> Any:
        """``client.<call>(Bucket=..., Key=..., **arguments)``; a failure as the package's
        error."""
        try:
            return getattr(self._client, call)(Bucket=self.bucket, Key=self.key, **arguments)
        except Exception as exc:
            raise store_error(exc, "upload", f"s3://{self.bucket}/{self.key}",
                              hint="The object was not written.") from exc

    def _upload_part(self, body: bytes) -> None:
        if self._upload_id is None:
            self._upload_id = self._store("create_multipart_upload")["UploadId"]
        number = len(self._parts) + 1
        answer = self._store("upload_part", Body=body, UploadId=self._upload_id,
                             PartNumber=number)
        self._parts.append({"ETag": answer["ETag"], "PartNumber": number})

    def finish(self) -> None:
        """Make the object appear at ``key``, whole."""
        if self._upload_id is None:
            self._store("put_object", Body=bytes(self._buffer))
        else:
            if self._buffer:
                self._upload_part(bytes(self._buffer))
            self._store("complete_multipart_upload", UploadId=self._upload_id,
                        MultipartUpload={"Parts": self._parts})
        self._buffer.clear()
        self.closed = True

    def cancel(self) -> None:
        """Drop what was written: ``key`` keeps what it held before. Never raises."""
        self._buffer.clear()
        self.closed = True
        if self._upload_id is not None:
            # what cannot be aborted now, the next publish of the folder aborts
            with contextlib.suppress(Exception):
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=self.key,
                                                    UploadId=self._upload_id)
