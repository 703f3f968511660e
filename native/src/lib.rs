//! `airflow_provider_kafka_spark._native`: Kafka <-> Arrow without a Python object per record.
//!
//! A thin layer over librdkafka (built from source by `rdkafka-sys`): [`read::SliceReader`]
//! consumes ranges of partitions into Arrow record batches, [`write::BatchProducer`]
//! produces the rows of Arrow record batches, [`decode::AvroDecoder`] decodes Kafka values
//! (Schema Registry Avro) into Arrow columns. Every decision about what a record, an event or
//! an error means stays in the Python package (`spark/datasource.py`, `spark/transactions.py`);
//! this crate only moves bytes and reports librdkafka's error codes as
//! `confluent_kafka.KafkaException(KafkaError(...))`, the shape the package already handles.

mod client;
mod decode;
mod read;
mod write;

use pyo3::prelude::*;

/// The librdkafka version this module was built with, e.g. `"2.10.0"`.
#[pyfunction]
fn librdkafka_version() -> String {
    client::librdkafka_version()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(librdkafka_version, m)?)?;
    m.add_class::<read::SliceReader>()?;
    m.add_class::<write::BatchProducer>()?;
    m.add_class::<decode::AvroDecoder>()?;
    Ok(())
}
