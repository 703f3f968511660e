"""A reader's upload to S3 that the store refuses or does not answer fails with the package's
error, in the task and, carried back by Spark, in the driver (``kafka_errors``); nothing
appears at the key. (``tests/integration/test_s3_faults.py`` stops a real server under the
readers.)"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from airflow_provider_kafka_spark.errors import ConfigurationError, SinkError, kafka_errors
from airflow_provider_kafka_spark.s3 import ObjectUpload


class Store:
    """A client whose ``put_object``/``upload_part`` raise ``failure``; records its calls."""

    def __init__(self, failure: Exception) -> None:
        self.failure, self.calls = failure, []

    def put_object(self, **kwargs: Any) -> Any:
        self.calls.append("put_object")
        raise self.failure

    def create_multipart_upload(self, **kwargs: Any) -> Any:
        self.calls.append("create_multipart_upload")
        return {"UploadId": "u1"}

    def upload_part(self, **kwargs: Any) -> Any:
        self.calls.append("upload_part")
        raise self.failure

    def abort_multipart_upload(self, **kwargs: Any) -> Any:
        self.calls.append("abort_multipart_upload")


def test_an_upload_the_store_does_not_answer_is_a_sink_error() -> None:
    store = Store(EndpointConnectionError(endpoint_url="http://127.0.0.1:9/b/k"))
    upload = ObjectUpload(store, "b", "out/part-t-0-0-9.parquet")
    upload.write(b"x" * 10)
    with pytest.raises(SinkError, match=r"^could not upload s3://b/out/part-t-0-0-9.parquet: "
                                        r"the S3 endpoint did not answer .* The object was not "
                                        r"written\.$"):
        upload.finish()

    parts = ObjectUpload(store, "b", "k", part_bytes=4)
    with pytest.raises(SinkError, match="could not upload s3://b/k"):
        parts.write(b"x" * 10)  # the first part's upload
    parts.cancel()
    assert store.calls[-3:] == ["create_multipart_upload", "upload_part",
                                "abort_multipart_upload"]


def test_an_upload_the_store_refuses_is_a_configuration_error() -> None:
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutObject")
    upload = ObjectUpload(Store(denied), "b", "k")
    with pytest.raises(ConfigurationError, match=r"S3 refused to upload s3://b/k: access is "
                                                 r"denied \(AccessDenied\)"):
        upload.finish()


@pytest.mark.parametrize(("raised", "kind"), [
    ("airflow_provider_kafka_spark.errors.SinkError: could not upload s3://b/k: the S3 "
     "endpoint did not answer. The object was not written.", SinkError),
    ("airflow_provider_kafka_spark.errors.ConfigurationError: S3 refused to upload s3://b/k: "
     "access is denied (AccessDenied).", ConfigurationError),
])
def test_a_tasks_store_error_comes_back_as_the_package_error(raised: str, kind: type) -> None:
    text = ("An exception was thrown from the Python worker:\nTraceback (most recent call "
            "last):\n  File \".../landing.py\", line 120, in write\n"
            "botocore.exceptions.EndpointConnectionError: Could not connect\n\n"
            "The above exception was the direct cause of the following exception:\n\n"
            f"{raised}\n")
    with pytest.raises(kind) as caught, kafka_errors():
        raise RuntimeError(text)
    assert type(caught.value) is kind
    assert str(caught.value) == raised.split(": ", 1)[1]


def test_no_credentials_is_a_configuration_error_that_says_what_to_pass() -> None:
    from botocore.exceptions import NoCredentialsError

    from airflow_provider_kafka_spark.s3 import store_error

    error = store_error(NoCredentialsError(), "list", "s3://b/p/")
    assert isinstance(error, ConfigurationError)
    assert str(error).startswith("could not list s3://b/p/: no credentials (NoCredentialsError)")
    assert "FileSink(s3=...)" in str(error) and "Over Spark Connect" in str(error)
