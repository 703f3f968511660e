//! `BatchProducer`: produces the rows of Arrow record batches, and the transaction calls.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::sync::Mutex;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, BinaryArray, RecordBatch, StringArray};
use arrow_pyarrow::FromPyArrow;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdkafka_sys as rd;

use crate::client::{
    error_exception, kafka_exception, millis, Client, Shared, ERR_INVALID_ARG, ERR_QUEUE_FULL,
};

/// How long a full local queue waits for room (serving delivery reports) before trying again.
const QUEUE_FULL_WAIT_MS: i32 = 50;

/// A librdkafka producer fed with Arrow record batches.
///
/// Batches hold the columns `value` (binary) and optionally `key` (binary), `topic` (string),
/// `partition` (int32, null: the partitioner chooses), `timestamp` (int64 microseconds since
/// the epoch, null or 0: now) and `headers` (list of struct key string, value binary);
/// `spark/transactions.py` brings Spark's batches to these types.
#[pyclass(module = "airflow_provider_kafka_spark._native")]
pub struct BatchProducer {
    client: Client,
    // Topic handles by name, created on first use, destroyed before the client.
    topics: Mutex<HashMap<String, Shared<rd::rd_kafka_topic_t>>>,
}

#[pymethods]
impl BatchProducer {
    /// A producer of `config` (librdkafka settings as strings). With `delivery_reports`,
    /// failed deliveries are counted (see `delivery_failures`).
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>, delivery_reports: bool) -> PyResult<Self> {
        let client = Client::new(py, rd::rd_kafka_type_t::RD_KAFKA_PRODUCER, config,
                                 delivery_reports)?;
        Ok(BatchProducer { client, topics: Mutex::new(HashMap::new()) })
    }

    /// Produce every row of `batch` (to `topic`, or each row's `topic` when None); returns the
    /// number of rows produced. A full local queue is waited out. Any other error of a row
    /// raises `KafkaException(KafkaError, row index)`: rows before it were produced.
    fn produce_batch(
        &self,
        py: Python<'_>,
        batch: &Bound<'_, PyAny>,
        topic: Option<String>,
    ) -> PyResult<usize> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let rows = Rows::of(&batch).map_err(|message| {
            kafka_exception(py, ERR_INVALID_ARG, &message, false, false, false)
        })?;
        let fixed_topic = match &topic {
            Some(name) => Some(self.topic(py, name)?),
            None => None,
        };
        let rk = self.client.shared();
        let outcome = py.detach(|| self.produce_rows(rk, &rows, fixed_topic));
        match outcome {
            Ok(count) => Ok(count),
            Err((row, error)) => Err(with_row(py, unsafe { error_exception(py, error.0) }, row)),
        }
    }

    /// Produce one record (`partition` -1: the partitioner chooses).
    #[pyo3(signature = (topic, value, key=None, partition=-1))]
    fn produce(
        &self,
        py: Python<'_>,
        topic: String,
        value: Option<Vec<u8>>,
        key: Option<Vec<u8>>,
        partition: i32,
    ) -> PyResult<()> {
        let rkt = self.topic(py, &topic)?;
        let rk = self.client.shared();
        let record = Record {
            rkt,
            partition,
            value: value.as_deref(),
            key: key.as_deref(),
            timestamp_ms: 0,
            headers: Shared(std::ptr::null_mut()),
        };
        let result = py.detach(|| produce_one(rk, record).map_err(Shared));
        result.map_err(|error| unsafe { error_exception(py, error.0) })
    }

    /// Serve delivery reports for up to `timeout_s`; returns the number of events served.
    fn poll(&self, py: Python<'_>, timeout_s: f64) -> i32 {
        let rk = self.client.shared();
        py.detach(move || unsafe { rd::rd_kafka_poll(rk.ptr(), millis(timeout_s)) })
    }

    /// Wait up to `timeout_s` for every queued record to be acknowledged or failed; returns
    /// how many are still queued (as confluent-kafka's `Producer.flush`).
    fn flush(&self, py: Python<'_>, timeout_s: f64) -> i32 {
        let rk = self.client.shared();
        py.detach(move || unsafe {
            rd::rd_kafka_flush(rk.ptr(), millis(timeout_s));
            rd::rd_kafka_outq_len(rk.ptr())
        })
    }

    /// `(failed records, (code, reason, topic, partition) of the first failure or None)`
    /// of the delivery reports so far (with `delivery_reports=True`).
    fn delivery_failures(&self) -> (u64, Option<(i32, String, String, i32)>) {
        match self.client.state.delivery.lock() {
            Ok(delivery) => (delivery.failed, delivery.first_failure.clone()),
            Err(_) => (0, None),
        }
    }

    /// The `(code, reason)` of the errors librdkafka reported through `error_cb` since the
    /// last call.
    fn take_errors(&self) -> Vec<(i32, String)> {
        self.client.take_errors()
    }

    fn init_transactions(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        self.transaction_call(py, move |rk| unsafe {
            rd::rd_kafka_init_transactions(rk, millis(timeout_s))
        })
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        self.transaction_call(py, |rk| unsafe { rd::rd_kafka_begin_transaction(rk) })
    }

    fn commit_transaction(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        self.transaction_call(py, move |rk| unsafe {
            rd::rd_kafka_commit_transaction(rk, millis(timeout_s))
        })
    }

    fn abort_transaction(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        self.transaction_call(py, move |rk| unsafe {
            rd::rd_kafka_abort_transaction(rk, millis(timeout_s))
        })
    }
}

impl BatchProducer {
    fn topic(&self, py: Python<'_>, name: &str) -> PyResult<Shared<rd::rd_kafka_topic_t>> {
        self.topic_handle(name).map_err(|error| unsafe { error_exception(py, error.0) })
    }

    /// The cached handle of topic `name` (created on first use).
    fn topic_handle(&self, name: &str)
                    -> Result<Shared<rd::rd_kafka_topic_t>, Shared<rd::rd_kafka_error_t>> {
        let mut topics = self.topics.lock().expect("topic handles");
        if let Some(handle) = topics.get(name) {
            return Ok(*handle);
        }
        let text = CString::new(name).map_err(|_| invalid("topic name contains a NUL character"))?;
        let handle = unsafe { rd::rd_kafka_topic_new(self.client.rk, text.as_ptr(), std::ptr::null_mut()) };
        if handle.is_null() {
            let code = unsafe { rd::rd_kafka_last_error() };
            return Err(Shared(unsafe { rd::rd_kafka_error_new(code, c"%s".as_ptr(), rd::rd_kafka_err2str(code)) }));
        }
        topics.insert(name.to_string(), Shared(handle));
        Ok(Shared(handle))
    }

    /// The row loop of `produce_batch`, without the GIL.
    fn produce_rows(
        &self,
        rk: Shared<rd::rd_kafka_t>,
        rows: &Rows<'_>,
        fixed_topic: Option<Shared<rd::rd_kafka_topic_t>>,
    ) -> Result<usize, (usize, Shared<rd::rd_kafka_error_t>)> {
        let mut last_topic: Option<(&str, Shared<rd::rd_kafka_topic_t>)> = None;
        for row in 0..rows.len {
            let rkt = match (fixed_topic, rows.topic) {
                (Some(handle), _) => handle,
                (None, Some(column)) => {
                    let name = column.value(row);
                    match last_topic {
                        Some((last, handle)) if last == name => handle,
                        _ => {
                            let handle = self.topic_handle(name).map_err(|error| (row, error))?;
                            last_topic = Some((name, handle));
                            handle
                        }
                    }
                }
                (None, None) => unreachable!("Rows::of requires a topic column without a topic"),
            };
            let headers = unsafe { rows.headers(row) };
            let record = Record {
                rkt,
                partition: rows.partition(row),
                value: rows.value.is_valid(row).then(|| rows.value.value(row)),
                key: rows.key.and_then(|k| k.is_valid(row).then(|| k.value(row))),
                timestamp_ms: rows.timestamp_ms(row),
                headers: Shared(headers),
            };
            if let Err(error) = produce_one(rk, record) {
                if !headers.is_null() {
                    unsafe { rd::rd_kafka_headers_destroy(headers) };
                }
                return Err((row, Shared(error)));
            }
        }
        unsafe { rd::rd_kafka_poll(rk.ptr(), 0) };
        Ok(rows.len)
    }

    fn transaction_call<F>(&self, py: Python<'_>, call: F) -> PyResult<()>
    where
        F: FnOnce(*mut rd::rd_kafka_t) -> *mut rd::rd_kafka_error_t + Send,
    {
        let rk = self.client.shared();
        let error = py.detach(move || Shared(call(rk.ptr())));
        if error.0.is_null() {
            Ok(())
        } else {
            Err(unsafe { error_exception(py, error.0) })
        }
    }
}

impl Drop for BatchProducer {
    fn drop(&mut self) {
        if let Ok(topics) = self.topics.get_mut() {
            for handle in topics.values() {
                unsafe { rd::rd_kafka_topic_destroy(handle.0) };
            }
        }
    }
}

/// A librdkafka error `_INVALID_ARG` with `message`.
fn invalid(message: &str) -> Shared<rd::rd_kafka_error_t> {
    let text = CString::new(message).unwrap_or_default();
    Shared(unsafe {
        rd::rd_kafka_error_new(rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__INVALID_ARG,
                               c"%s".as_ptr(), text.as_ptr())
    })
}

/// `exception` (a KafkaException) with the failing row's index as its second argument.
fn with_row(py: Python<'_>, exception: PyErr, row: usize) -> PyErr {
    let value = exception.value(py);
    match value.getattr("args").and_then(|args| args.get_item(0)) {
        Ok(error) => match value.get_type().call1((error, row)) {
            Ok(with_row) => PyErr::from_value(with_row),
            Err(_) => exception,
        },
        Err(_) => exception,
    }
}

/// One record to produce; `headers` (owned, may be NULL) pass to librdkafka on success.
struct Record<'a> {
    rkt: Shared<rd::rd_kafka_topic_t>,
    partition: i32,
    value: Option<&'a [u8]>,
    key: Option<&'a [u8]>,
    timestamp_ms: i64,
    headers: Shared<rd::rd_kafka_headers_t>,
}

/// `rd_kafka_produceva` of one record (payloads copied), waiting out a full local queue.
fn produce_one(rk: Shared<rd::rd_kafka_t>, record: Record<'_>) -> Result<(), *mut rd::rd_kafka_error_t> {
    use rd::rd_kafka_vtype_t as V;
    let empty = rd::rd_kafka_vu_s { vtype: V::RD_KAFKA_VTYPE_END, u: rd::rd_kafka_vu_s__bindgen_ty_1 { i64_: 0 } };
    let mut vus = [empty; 7];
    let mut count = 0;
    let mut push = |vtype: V, u: rd::rd_kafka_vu_s__bindgen_ty_1| {
        vus[count] = rd::rd_kafka_vu_s { vtype, u };
        count += 1;
    };
    push(V::RD_KAFKA_VTYPE_RKT, rd::rd_kafka_vu_s__bindgen_ty_1 { rkt: record.rkt.0 });
    push(V::RD_KAFKA_VTYPE_PARTITION, rd::rd_kafka_vu_s__bindgen_ty_1 { i32_: record.partition });
    push(V::RD_KAFKA_VTYPE_MSGFLAGS, rd::rd_kafka_vu_s__bindgen_ty_1 { i: rd::RD_KAFKA_MSG_F_COPY });
    let (ptr, size) = match record.value {
        Some(bytes) => (bytes.as_ptr() as *mut c_void, bytes.len()),
        None => (std::ptr::null_mut(), 0),
    };
    push(V::RD_KAFKA_VTYPE_VALUE, rd::rd_kafka_vu_s__bindgen_ty_1 {
        mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 { ptr, size } });
    if let Some(key) = record.key {
        push(V::RD_KAFKA_VTYPE_KEY, rd::rd_kafka_vu_s__bindgen_ty_1 {
            mem: rd::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                ptr: key.as_ptr() as *mut c_void, size: key.len() } });
    }
    if record.timestamp_ms != 0 {
        push(V::RD_KAFKA_VTYPE_TIMESTAMP, rd::rd_kafka_vu_s__bindgen_ty_1 { i64_: record.timestamp_ms });
    }
    if !record.headers.0.is_null() {
        push(V::RD_KAFKA_VTYPE_HEADERS, rd::rd_kafka_vu_s__bindgen_ty_1 { headers: record.headers.0 });
    }
    loop {
        let error = unsafe { rd::rd_kafka_produceva(rk.ptr(), vus.as_ptr(), count) };
        if error.is_null() {
            return Ok(());
        }
        if unsafe { rd::rd_kafka_error_code(error) } as i32 != ERR_QUEUE_FULL {
            return Err(error);
        }
        unsafe {
            rd::rd_kafka_error_destroy(error);
            rd::rd_kafka_poll(rk.ptr(), QUEUE_FULL_WAIT_MS);
        }
    }
}

fn need<T>(column: Option<T>, name: &str, expected: &str) -> Result<T, String> {
    column.ok_or_else(|| format!("column {name:?} of the batch must be {expected}"))
}

/// The columns of a batch to produce, checked once per batch.
struct Rows<'a> {
    len: usize,
    value: &'a BinaryArray,
    key: Option<&'a BinaryArray>,
    topic: Option<&'a StringArray>,
    partition: Option<&'a arrow_array::PrimitiveArray<Int32Type>>,
    timestamp: Option<&'a arrow_array::PrimitiveArray<Int64Type>>,
    headers: Option<&'a arrow_array::ListArray>,
}

impl<'a> Rows<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Rows<'a>, String> {
        let column = |name: &str| batch.column_by_name(name);
        let value = match column("value") {
            Some(array) => need(array.as_binary_opt::<i32>(), "value", "binary")?,
            None => return Err("the batch has no 'value' column".to_string()),
        };
        let key = column("key").map(|a| need(a.as_binary_opt::<i32>(), "key", "binary")).transpose()?;
        let topic = column("topic").map(|a| need(a.as_string_opt::<i32>(), "topic", "string")).transpose()?;
        let partition = column("partition").map(|a| need(a.as_primitive_opt::<Int32Type>(), "partition", "int32")).transpose()?;
        let timestamp = column("timestamp").map(|a| need(a.as_primitive_opt::<Int64Type>(), "timestamp", "int64")).transpose()?;
        let headers = match column("headers") {
            Some(array) => {
                let list = need(array.as_list_opt::<i32>(), "headers", "a list")?;
                let entries = list.values().as_struct_opt().ok_or_else(|| "headers must be a list of structs".to_string())?;
                if entries.num_columns() != 2
                    || entries.column(0).as_string_opt::<i32>().is_none()
                    || entries.column(1).as_binary_opt::<i32>().is_none()
                {
                    return Err("headers must be a list of struct<key: string, value: binary>".to_string());
                }
                Some(list)
            }
            None => None,
        };
        Ok(Rows { len: batch.num_rows(), value, key, topic, partition, timestamp, headers })
    }

    fn partition(&self, row: usize) -> i32 {
        match self.partition {
            Some(column) if column.is_valid(row) => column.value(row),
            _ => -1,
        }
    }

    fn timestamp_ms(&self, row: usize) -> i64 {
        match self.timestamp {
            // Microseconds -> milliseconds, rounding down (also before 1970).
            Some(column) if column.is_valid(row) => column.value(row).div_euclid(1000),
            _ => 0,
        }
    }

    /// The row's headers as a new librdkafka list (NULL when it has none).
    unsafe fn headers(&self, row: usize) -> *mut rd::rd_kafka_headers_t {
        let Some(list) = self.headers else { return std::ptr::null_mut() };
        if !list.is_valid(row) {
            return std::ptr::null_mut();
        }
        let offsets = list.value_offsets();
        let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
        if start == end {
            return std::ptr::null_mut();
        }
        let entries = list.values().as_struct();
        let keys = entries.column(0).as_string::<i32>();
        let values = entries.column(1).as_binary::<i32>();
        let headers = rd::rd_kafka_headers_new(end - start);
        for index in start..end {
            let key = keys.value(index);
            let (ptr, size) = if values.is_valid(index) {
                let bytes = values.value(index);
                (bytes.as_ptr() as *const c_void, bytes.len() as isize)
            } else {
                (std::ptr::null(), 0)
            };
            rd::rd_kafka_header_add(headers, key.as_ptr() as *const c_char, key.len() as isize, ptr, size);
        }
        headers
    }
}
