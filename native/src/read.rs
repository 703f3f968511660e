//! `SliceReader`: consumes ranges of partitions with one consumer and builds Arrow record
//! batches, one range at a time.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::types::TimestampMicrosecondType;
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, ListArray, PrimitiveArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use arrow_schema::{DataType, FieldRef, Fields, Schema, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdkafka_sys as rd;

use crate::client::{cstr, kafka_exception, millis, Client, Shared};

/// Messages taken from the consumer queue per call.
const CONSUME_CHUNK: usize = 1_000;

/// The longest single wait for the first records of a fill (repeated until its timeout).
const FIRST_WAIT_SLICE_MS: i32 = 20;

/// How long a fill that holds records waits for the next one before it returns them.
const FOLLOW_WAIT_MS: i32 = 10;

/// One librdkafka event that ends a fill: `(code, reason, offset)`.
type Event = (i32, String, i64);

/// One range of a reader: a partition, its own queue of fetched messages, where it stops and
/// the offset its next record is expected at.
struct Range {
    topic: String,
    partition: i32,
    stop: i64,
    queue: Shared<rd::rd_kafka_queue_t>,
    position: AtomicI64,
}

/// Reads ranges of several partitions (of one or more topics) with one consumer, each range
/// from an assigned offset, into record batches of one range each, whose schema is the one
/// given (the `kafka_bounded` schema: key, value, topic, partition, offset, timestamp,
/// timestampType and optionally headers).
///
/// The consumer is `assign()`-ed to every range at once (never subscribed) and never commits:
/// librdkafka fetches all of them in the same requests, into one queue per partition, while
/// the caller takes the ranges' records one range after the other (`fill(index, ...)`).
#[pyclass(module = "airflow_provider_kafka_spark._native")]
pub struct SliceReader {
    client: Option<Client>,
    // The consumer queue: the client's events that belong to no partition.
    queue: Shared<rd::rd_kafka_queue_t>,
    ranges: Vec<Range>,
    schema: SchemaRef,
    headers: Option<(FieldRef, Fields)>,
}

#[pymethods]
impl SliceReader {
    /// A consumer of `config` (librdkafka settings as strings) assigned to each
    /// `(topic, partition, start, stop)` of `ranges` at its `start`; records of a range at
    /// offsets `>= stop` are never returned. No two ranges may name the same partition.
    #[new]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyDict>,
        ranges: Vec<(String, i32, i64, i64)>,
        schema: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let schema = Arc::new(Schema::from_pyarrow_bound(schema)?);
        let headers = match schema.field_with_name("headers") {
            Ok(field) => match field.data_type() {
                DataType::List(element) => match element.data_type() {
                    DataType::Struct(children) => Some((element.clone(), children.clone())),
                    _ => None,
                },
                _ => None,
            },
            Err(_) => None,
        };
        let mut seen = std::collections::HashSet::new();
        let mut names = Vec::with_capacity(ranges.len());
        for (topic, partition, _, _) in &ranges {
            if !seen.insert((topic.clone(), *partition)) {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "partition {topic}/{partition} is named by more than one range")));
            }
            names.push(CString::new(topic.as_str()).map_err(
                |_| kafka_exception(py, -186, "topic name contains NUL", false, false, false))?);
        }
        let client = Client::new(py, rd::rd_kafka_type_t::RD_KAFKA_CONSUMER, config, false)?;
        let queue = unsafe {
            rd::rd_kafka_poll_set_consumer(client.rk);
            Shared(rd::rd_kafka_queue_get_consumer(client.rk))
        };
        let mut reader = SliceReader { client: None, queue, ranges: Vec::new(), schema, headers };
        for ((topic, partition, start, stop), name) in ranges.into_iter().zip(names.iter()) {
            // The partition's own queue, not forwarded to the consumer queue (an application
            // forward: the assignment keeps it so).
            let partition_queue = unsafe {
                let q = rd::rd_kafka_queue_get_partition(client.rk, name.as_ptr(), partition);
                if !q.is_null() {
                    rd::rd_kafka_queue_forward(q, std::ptr::null_mut());
                }
                q
            };
            if partition_queue.is_null() {
                let queues = reader.ranges.iter().map(|r| r.queue).chain(std::iter::once(queue))
                    .collect();
                destroy(client, queues);
                return Err(kafka_exception(py, -190, &format!(
                    "no queue for partition {topic}/{partition}"), false, false, false));
            }
            reader.ranges.push(Range {
                topic, partition, stop, queue: Shared(partition_queue),
                position: AtomicI64::new(start),
            });
        }
        reader.client = Some(client);
        let err = unsafe {
            let client = reader.client()?;
            let list = rd::rd_kafka_topic_partition_list_new(reader.ranges.len() as i32);
            for (range, name) in reader.ranges.iter().zip(names.iter()) {
                let entry = rd::rd_kafka_topic_partition_list_add(list, name.as_ptr(), range.partition);
                (*entry).offset = range.position.load(Ordering::Relaxed);
            }
            let err = rd::rd_kafka_assign(client.rk, list);
            rd::rd_kafka_topic_partition_list_destroy(list);
            err
        };
        if err as i32 != 0 {
            let reason = unsafe { cstr(rd::rd_kafka_err2str(err)) };
            return Err(kafka_exception(py, err as i32, &reason, false, false, false));
        }
        Ok(reader)
    }

    /// How many ranges the reader reads.
    fn __len__(&self) -> usize {
        self.ranges.len()
    }

    /// Consume up to `max_records` records of range `index` below its `stop` into one batch,
    /// waiting at most `timeout_s` for the first one (then `FOLLOW_WAIT_MS` for each next
    /// one); returns `(batch or None, next offset or -1, event)`.
    ///
    /// The fill ends early at the first record at or beyond `stop` (next offset = `stop`, the
    /// record is dropped), at the first event of the partition (end of partition, an error:
    /// returned as `(code, reason, offset)` with the records before it), or when no next
    /// record arrives in time. An error event of the consumer itself (of no partition) is
    /// returned when the partition had none.
    fn fill<'py>(
        &self,
        py: Python<'py>,
        index: usize,
        max_records: usize,
        timeout_s: f64,
    ) -> PyResult<(Option<Bound<'py, PyAny>>, i64, Option<Event>)> {
        self.client()?;
        let range = self.range(index)?;
        let (queue, position, stop) = (range.queue, range.position.load(Ordering::Relaxed), range.stop);
        let consumer_queue = self.queue;
        let with_headers = self.headers.is_some();
        let (columns, next, event) = py.detach(move || {
            let (columns, next, event) = consume(queue, position, stop, max_records,
                                                 Duration::from_secs_f64(timeout_s.max(0.0)), with_headers);
            // Serve the consumer queue too: error_cb runs from it.
            let other = serve(consumer_queue);
            (columns, next, event.or(other))
        });
        if next >= 0 {
            range.position.store(next, Ordering::Relaxed);
        }
        let batch = if columns.len() == 0 { None } else { Some(self.batch(range, columns)?.to_pyarrow(py)?) };
        Ok((batch, next, event))
    }

    /// Stop fetching the partition of range `index` (its range is read, or read elsewhere).
    fn pause(&self, py: Python<'_>, index: usize) -> PyResult<()> {
        let client = self.client()?;
        let range = self.range(index)?;
        let topic = CString::new(range.topic.as_str()).unwrap_or_default();
        let err = unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            rd::rd_kafka_topic_partition_list_add(list, topic.as_ptr(), range.partition);
            let err = rd::rd_kafka_pause_partitions(client.rk, list);
            rd::rd_kafka_topic_partition_list_destroy(list);
            err
        };
        if err as i32 != 0 {
            let reason = unsafe { cstr(rd::rd_kafka_err2str(err)) };
            return Err(kafka_exception(py, err as i32, &reason, false, false, false));
        }
        Ok(())
    }

    /// `(low, high)` watermarks of the partition of range `index`, asked of its leader.
    fn watermarks(&self, py: Python<'_>, index: usize, timeout_s: f64) -> PyResult<(i64, i64)> {
        let rk = self.client()?.shared();
        let range = self.range(index)?;
        let topic = CString::new(range.topic.as_str()).unwrap_or_default();
        let partition = range.partition;
        let (err, low, high) = py.detach(move || {
            let (mut low, mut high) = (0i64, 0i64);
            let err = unsafe {
                rd::rd_kafka_query_watermark_offsets(
                    rk.ptr(), topic.as_ptr(), partition, &mut low, &mut high, millis(timeout_s))
            };
            (err, low, high)
        });
        if err as i32 != 0 {
            let reason = unsafe { cstr(rd::rd_kafka_err2str(err)) };
            return Err(kafka_exception(py, err as i32, &reason, false, false, false));
        }
        Ok((low, high))
    }

    /// The `(code, reason)` of the errors librdkafka reported through `error_cb` since the
    /// last call (authentication failures, all brokers down...).
    fn take_errors(&self) -> PyResult<Vec<(i32, String)>> {
        Ok(self.client()?.take_errors())
    }

    /// Leave the partitions and destroy the consumer; later calls raise.
    fn close(&mut self, py: Python<'_>) {
        if let Some(client) = self.client.take() {
            let queues: Vec<Shared<rd::rd_kafka_queue_t>> =
                self.ranges.iter().map(|r| r.queue).chain(std::iter::once(self.queue)).collect();
            py.detach(move || {
                destroy(client, queues);
            });
        }
    }
}

/// The queues first (each holds a reference to the client), then the consumer.
fn destroy(client: Client, queues: Vec<Shared<rd::rd_kafka_queue_t>>) {
    unsafe {
        for queue in queues {
            rd::rd_kafka_queue_destroy(queue.ptr());
        }
        rd::rd_kafka_consumer_close(client.rk);
    }
    drop(client);
}

impl Drop for SliceReader {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let queues = self.ranges.iter().map(|r| r.queue).chain(std::iter::once(self.queue)).collect();
            destroy(client, queues);
        }
    }
}

impl SliceReader {
    fn client(&self) -> PyResult<&Client> {
        self.client.as_ref().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("the SliceReader is closed")
        })
    }

    fn range(&self, index: usize) -> PyResult<&Range> {
        self.ranges.get(index).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!(
                "range {index} of a reader of {} ranges", self.ranges.len()))
        })
    }

    fn batch(&self, range: &Range, mut columns: Columns) -> PyResult<RecordBatch> {
        let n = columns.len();
        let to_py = |e: arrow_schema::ArrowError| pyo3::exceptions::PyValueError::new_err(e.to_string());
        let timestamp_type = self.schema.field_with_name("timestamp").map_err(to_py)?.data_type().clone();
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(columns.keys.finish()),
            Arc::new(columns.values.finish()),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(range.topic.as_str(), n))),
            Arc::new(Int32Array::from(vec![range.partition; n])),
            Arc::new(Int64Array::from(columns.offsets)),
            Arc::new(PrimitiveArray::<TimestampMicrosecondType>::new(
                ScalarBuffer::from(columns.timestamps), None).with_data_type(timestamp_type)),
            Arc::new(Int32Array::from(columns.timestamp_types)),
        ];
        if let Some((element, children)) = &self.headers {
            let mut header_keys = columns.header_keys;
            let mut header_values = columns.header_values;
            let entries = StructArray::try_new(
                children.clone(),
                vec![Arc::new(header_keys.finish()), Arc::new(header_values.finish())],
                None,
            ).map_err(to_py)?;
            let valid = NullBuffer::from(columns.header_valid);
            let list = ListArray::try_new(
                element.clone(),
                OffsetBuffer::new(ScalarBuffer::from(columns.header_offsets)),
                Arc::new(entries),
                if valid.null_count() > 0 { Some(valid) } else { None },
            ).map_err(to_py)?;
            arrays.push(Arc::new(list));
        }
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(to_py)
    }
}

/// The columns of the records of one fill.
struct Columns {
    keys: BinaryBuilder,
    values: BinaryBuilder,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    timestamp_types: Vec<i32>,
    header_offsets: Vec<i32>,
    header_valid: Vec<bool>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
}

impl Columns {
    fn new(capacity: usize) -> Self {
        Columns {
            keys: BinaryBuilder::with_capacity(capacity, 0),
            values: BinaryBuilder::with_capacity(capacity, capacity * 64),
            offsets: Vec::with_capacity(capacity),
            timestamps: Vec::with_capacity(capacity),
            timestamp_types: Vec::with_capacity(capacity),
            header_offsets: vec![0],
            header_valid: Vec::new(),
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
        }
    }

    fn len(&self) -> usize {
        self.offsets.len()
    }

    unsafe fn push(&mut self, message: &rd::rd_kafka_message_t, with_headers: bool) {
        append(&mut self.keys, message.key, message.key_len);
        append(&mut self.values, message.payload, message.len);
        self.offsets.push(message.offset);
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        let millis = rd::rd_kafka_message_timestamp(message, &mut kind);
        self.timestamps.push(millis * 1000);
        // librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime -> Java's ids -1, 0, 1.
        self.timestamp_types.push(kind as i32 - 1);
        if with_headers {
            self.push_headers(message);
        }
    }

    unsafe fn push_headers(&mut self, message: &rd::rd_kafka_message_t) {
        let mut headers: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
        let err = rd::rd_kafka_message_headers(message, &mut headers);
        let last = *self.header_offsets.last().unwrap_or(&0);
        if err as i32 != 0 || headers.is_null() {
            // No headers: null, as confluent-kafka's Message.headers() gives None.
            self.header_offsets.push(last);
            self.header_valid.push(false);
            return;
        }
        let count = rd::rd_kafka_header_cnt(headers);
        for index in 0..count {
            let mut name: *const std::ffi::c_char = std::ptr::null();
            let mut value: *const c_void = std::ptr::null();
            let mut size: usize = 0;
            if rd::rd_kafka_header_get_all(headers, index, &mut name, &mut value, &mut size) as i32 != 0 {
                break;
            }
            self.header_keys.append_value(cstr(name));
            append(&mut self.header_values, value, size);
        }
        self.header_offsets.push(last + count as i32);
        self.header_valid.push(true);
    }
}

unsafe fn append(builder: &mut BinaryBuilder, data: *const c_void, len: usize) {
    if data.is_null() {
        builder.append_null();
    } else {
        builder.append_value(std::slice::from_raw_parts(data as *const u8, len));
    }
}

/// Take what the consumer queue holds, without waiting (librdkafka runs `error_cb` while it is
/// served): the first error event of no partition, if any.
fn serve(queue: Shared<rd::rd_kafka_queue_t>) -> Option<Event> {
    let mut messages: Vec<*mut rd::rd_kafka_message_t> = vec![std::ptr::null_mut(); 64];
    let taken = unsafe { rd::rd_kafka_consume_batch_queue(queue.ptr(), 0, messages.as_mut_ptr(), 64) };
    let mut event = None;
    for &message in &messages[..taken.max(0) as usize] {
        let record = unsafe { &*message };
        if event.is_none() && record.err as i32 != 0 {
            let reason = unsafe { cstr(rd::rd_kafka_message_errstr(message)) };
            event = Some((record.err as i32, reason, record.offset));
        }
        unsafe { rd::rd_kafka_message_destroy(message) };
    }
    event
}

/// The consume loop of one fill, without the GIL (see `SliceReader.fill`): messages are
/// taken from the partition's queue up to `CONSUME_CHUNK` at a time (one queue lock each).
fn consume(
    queue: Shared<rd::rd_kafka_queue_t>,
    position: i64,
    stop: i64,
    max_records: usize,
    timeout: Duration,
    with_headers: bool,
) -> (Columns, i64, Option<Event>) {
    let mut columns = Columns::new(max_records.min(65_536));
    let mut next = -1i64;
    let deadline = Instant::now() + timeout;
    let mut messages: Vec<*mut rd::rd_kafka_message_t> = vec![std::ptr::null_mut(); CONSUME_CHUNK];
    while columns.len() < max_records {
        // The call waits until it has `want` messages or the wait is over, also after an
        // event (the end of the partition counts as one message): never ask for more records
        // than the range still holds, and wait in slices so that a range ending in gaps
        // (markers, aborted records) is not held for the whole timeout.
        let wait = if columns.len() > 0 {
            FOLLOW_WAIT_MS
        } else {
            deadline.saturating_duration_since(Instant::now()).as_millis()
                .min(FIRST_WAIT_SLICE_MS as u128) as i32
        };
        let at = if next >= 0 { next } else { position };
        let left = (stop - at).max(1) as usize;
        let want = CONSUME_CHUNK.min(max_records - columns.len()).min(left);
        let taken = unsafe {
            rd::rd_kafka_consume_batch_queue(queue.ptr(), wait, messages.as_mut_ptr(), want)
        };
        if taken <= 0 {
            if columns.len() > 0 || Instant::now() >= deadline {
                break;
            }
            continue;
        }
        let taken = &messages[..taken as usize];
        let mut outcome: Option<Option<Event>> = None;
        for &message in taken {
            if outcome.is_some() {
                unsafe { rd::rd_kafka_message_destroy(message) };
                continue;
            }
            let record = unsafe { &*message };
            if record.err as i32 != 0 {
                let reason = unsafe { cstr(rd::rd_kafka_message_errstr(message)) };
                outcome = Some(Some((record.err as i32, reason, record.offset)));
            } else if record.offset >= stop {
                next = stop;
                outcome = Some(None);
            } else {
                unsafe { columns.push(record, with_headers) };
                next = record.offset + 1;
                if next >= stop {
                    outcome = Some(None);
                }
            }
            unsafe { rd::rd_kafka_message_destroy(message) };
        }
        if let Some(event) = outcome {
            return (columns, next, event);
        }
    }
    (columns, next, None)
}
