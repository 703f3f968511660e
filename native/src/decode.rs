//! Kafka values decoded into Arrow columns (issue 53): Avro in the Confluent Schema Registry
//! wire format with `arrow-avro`.
//!
//! The decoder takes a binary column (one Kafka value per row) and return a struct column of
//! the same length plus, per row that did not decode, `(row, reason)`. A null value (a
//! tombstone) is a null row and not corrupt. Which rows are corrupt and why is decided here;
//! what that means (`on_corrupt`, topic/partition/offset in the message) is decided in Python
//! (`spark/formats/fast.py`).
//!
//! It decodes a whole run of records at once and goes record by record only after a
//! failure: a record that fails leaves the row builders half-written, so the decoder is rebuilt,
//! the good records since the last flush are decoded again and flushed, and decoding goes on.
//! Every good record is decoded at most twice, whatever the number of corrupt ones.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{new_null_array, Array, ArrayRef, BinaryArray, RecordBatch, StructArray};
use arrow_avro::reader::{Decoder as AvroRowDecoder, DecoderMode, ReaderBuilder as AvroBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use arrow_data::ArrayData;
use arrow_pyarrow::PyArrowType;
use arrow_schema::{DataType, Fields, SchemaRef};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Rows decoded per flush: the size of one Arrow batch the row decoders build at once.
const CHUNK: usize = 8192;

/// Decoded rows: struct arrays, each with the input rows its rows belong to.
struct Segments {
    arrays: Vec<ArrayRef>,
    rows: Vec<Vec<usize>>,
}

impl Segments {
    fn new() -> Self {
        Segments { arrays: Vec::new(), rows: Vec::new() }
    }

    fn push(&mut self, batch: RecordBatch, rows: Vec<usize>) {
        debug_assert_eq!(batch.num_rows(), rows.len());
        self.arrays.push(Arc::new(StructArray::from(batch)));
        self.rows.push(rows);
    }

    /// Every array as `data_type`: writer schemas put their own field metadata (defaults,
    /// names) on the same reader type, which `interleave` would take for another type.
    fn retyped(mut self, data_type: &DataType) -> PyResult<Self> {
        for array in self.arrays.iter_mut() {
            if array.data_type() == data_type {
                continue;
            }
            if !array.data_type().equals_datatype(data_type) {
                return Err(PyValueError::new_err(format!(
                    "a writer schema decoded into {}, not the reader schema's {data_type}",
                    array.data_type())));
            }
            *array = arrow_array::make_array(retype(&array.to_data(), data_type));
        }
        Ok(self)
    }

    /// One struct array of `len` rows in input order; rows no segment holds are null.
    fn assemble(self, fields: &Fields, len: usize) -> PyResult<ArrayData> {
        let data_type = DataType::Struct(fields.clone());
        let segments = self.retyped(&data_type)?;
        let null = new_null_array(&data_type, 1);
        let null_source = segments.arrays.len();
        let mut at = vec![(null_source, 0usize); len];
        for (source, rows) in segments.rows.iter().enumerate() {
            for (i, row) in rows.iter().enumerate() {
                at[*row] = (source, i);
            }
        }
        let mut sources: Vec<&dyn Array> = segments.arrays.iter().map(|a| a.as_ref()).collect();
        sources.push(null.as_ref());
        let out = arrow_select::interleave::interleave(&sources, &at)
            .map_err(|e| PyValueError::new_err(format!("assembling the decoded rows: {e}")))?;
        Ok(out.to_data())
    }
}

/// `data` with the type `data_type`, which equals its own but for field metadata and names.
fn retype(data: &ArrayData, data_type: &DataType) -> ArrayData {
    let child_types: Vec<DataType> = match data_type {
        DataType::Struct(fields) => fields.iter().map(|f| f.data_type().clone()).collect(),
        DataType::List(f) | DataType::LargeList(f) | DataType::Map(f, _)
        | DataType::FixedSizeList(f, _) => vec![f.data_type().clone()],
        DataType::Dictionary(_, values) => vec![values.as_ref().clone()],
        _ => Vec::new(),
    };
    let children: Vec<ArrayData> = data.child_data().iter().zip(child_types.iter())
        .map(|(child, t)| retype(child, t)).collect();
    let builder = data.clone().into_builder().data_type(data_type.clone());
    let builder = if children.is_empty() { builder } else { builder.child_data(children) };
    // SAFETY: only the type's field names and metadata change (`equals_datatype` checked
    // that), so the buffers keep the layout they were validated with.
    unsafe { builder.build_unchecked() }
}

/// `fields` without field metadata, at every depth.
fn plain_fields(fields: &Fields) -> Fields {
    fields.iter().map(|f| {
        Arc::new(f.as_ref().clone().with_metadata(HashMap::new())
            .with_data_type(plain_type(f.data_type())))
    }).collect()
}

fn plain_type(data_type: &DataType) -> DataType {
    let plain = |f: &arrow_schema::FieldRef| -> arrow_schema::FieldRef {
        Arc::new(f.as_ref().clone().with_metadata(HashMap::new())
            .with_data_type(plain_type(f.data_type())))
    };
    match data_type {
        DataType::Struct(fields) => DataType::Struct(plain_fields(fields)),
        DataType::List(f) => DataType::List(plain(f)),
        DataType::LargeList(f) => DataType::LargeList(plain(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(plain(f), *n),
        DataType::Map(f, sorted) => DataType::Map(plain(f), *sorted),
        other => other.clone(),
    }
}

fn binary_values(values: &ArrayData) -> PyResult<BinaryArray> {
    if values.data_type() != &DataType::Binary {
        return Err(PyValueError::new_err(format!(
            "the values to decode are {}, not binary; cast them to pa.binary()",
            values.data_type())));
    }
    Ok(BinaryArray::from(values.clone()))
}

/// A decoder that can be rebuilt after a failure and fed one record at a time.
trait RowDecoder {
    /// Decode one record; `Err(reason)` when it is not one good record.
    fn feed(&mut self, record: &[u8]) -> Result<(), String>;
    fn flush(&mut self) -> Result<Option<RecordBatch>, String>;
    fn is_full(&self) -> bool;
}

/// Decode `records` (`(row, bytes)`) with decoders from `build`, into `out` and `corrupt`.
fn decode_run<D: RowDecoder>(
    build: &dyn Fn() -> PyResult<D>,
    records: &[(usize, &[u8])],
    out: &mut Segments,
    corrupt: &mut Vec<(usize, String)>,
) -> PyResult<()> {
    let mut decoder = build()?;
    let mut pending: Vec<usize> = Vec::new(); // indices into `records` fed since the last flush
    for (k, (row, bytes)) in records.iter().enumerate() {
        match decoder.feed(bytes) {
            Ok(()) => {
                pending.push(k);
                if decoder.is_full() {
                    flush_pending(build, &mut decoder, records, &mut pending, out, corrupt)?;
                }
            }
            Err(reason) => {
                corrupt.push((*row, reason));
                decoder = build()?;
                for &p in &pending {
                    // These decoded before: they decode again into the fresh builders.
                    decoder.feed(records[p].1).map_err(|e| PyValueError::new_err(format!(
                        "a record decoded once failed the second time: {e}")))?;
                }
                flush_pending(build, &mut decoder, records, &mut pending, out, corrupt)?;
            }
        }
    }
    flush_pending(build, &mut decoder, records, &mut pending, out, corrupt)
}

/// Flush the pending records; when the flush fails (a value that only the batch's build
/// checks, e.g. invalid UTF-8 or a type mismatch), decode and flush them one by one.
fn flush_pending<D: RowDecoder>(
    build: &dyn Fn() -> PyResult<D>,
    decoder: &mut D,
    records: &[(usize, &[u8])],
    pending: &mut Vec<usize>,
    out: &mut Segments,
    corrupt: &mut Vec<(usize, String)>,
) -> PyResult<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let rows: Vec<usize> = pending.iter().map(|&p| records[p].0).collect();
    match decoder.flush() {
        Ok(Some(batch)) if batch.num_rows() == rows.len() => {
            out.push(batch, rows);
            pending.clear();
            return Ok(());
        }
        Ok(_) | Err(_) => {}
    }
    for &p in pending.iter() {
        let (row, bytes) = records[p];
        *decoder = build()?;
        let one = decoder.feed(bytes).and_then(|_| decoder.flush());
        match one {
            Ok(Some(batch)) if batch.num_rows() == 1 => out.push(batch, vec![row]),
            Ok(_) => corrupt.push((row, "the record decoded to no row".to_string())),
            Err(reason) => corrupt.push((row, reason)),
        }
    }
    *decoder = build()?;
    pending.clear();
    Ok(())
}

struct AvroRows(AvroRowDecoder);

impl RowDecoder for AvroRows {
    fn feed(&mut self, record: &[u8]) -> Result<(), String> {
        // Bytes after the record are ignored, as confluent-kafka's deserializer does.
        self.0.decode(record).map(|_| ()).map_err(|e| avro_reason(&e.to_string()))
    }
    fn flush(&mut self) -> Result<Option<RecordBatch>, String> {
        self.0.flush().map_err(|e| avro_reason(&e.to_string()))
    }
    fn is_full(&self) -> bool {
        self.0.batch_is_full()
    }
}

fn avro_reason(error: &str) -> String {
    let error = error.lines().next().unwrap_or("").chars().take(300).collect::<String>();
    if error.contains("EOF") || error.contains("more data") || error.contains("Unexpected end") {
        return format!("the Avro payload is truncated ({error})");
    }
    format!("the Avro payload does not decode with its writer schema ({error})")
}

/// Decodes Avro values in the Confluent Schema Registry wire format (magic byte `0`, a 4-byte
/// big-endian schema id, the Avro binary body) into a struct column of the reader schema,
/// resolving each writer schema (by id, given by the caller) against it.
#[pyclass(module = "airflow_provider_kafka_spark._native")]
pub struct AvroDecoder {
    reader: String,
    fields: Fields,
    /// Writer schemas by id; `Err(reason)` for one the reader schema cannot take here.
    writers: HashMap<u32, Result<String, String>>,
}

impl AvroDecoder {
    fn builder(&self, id: u32, writer: &str) -> AvroBuilder {
        let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
        // `set` only fails for a fingerprint of another algorithm.
        let _ = store.set(Fingerprint::Id(id), AvroSchema::new(writer.to_string()));
        AvroBuilder::new()
            .with_writer_schema_store(store)
            .with_reader_schema(AvroSchema::new(self.reader.clone()))
            .with_decoder_mode(DecoderMode::UnframedDatum)
            .with_active_fingerprint(Fingerprint::Id(id))
            .with_batch_size(CHUNK)
    }

    fn build(&self, id: u32, writer: &str) -> PyResult<AvroRows> {
        self.builder(id, writer).build_decoder().map(AvroRows).map_err(|e| {
            PyValueError::new_err(format!("the Avro decoder of schema id {id}: {e}"))
        })
    }
}

#[pymethods]
impl AvroDecoder {
    /// `reader_schema`: the reader schema's JSON text (a record).
    #[new]
    fn new(reader_schema: &str) -> PyResult<Self> {
        let mut decoder = AvroDecoder {
            reader: reader_schema.to_string(),
            fields: Fields::empty(),
            writers: HashMap::new(),
        };
        // The reader schema read by itself gives the output's Arrow type.
        let built = decoder.builder(0, reader_schema).build_decoder().map_err(|e| {
            PyValueError::new_err(format!("the Avro reader schema is not one arrow-avro reads: {e}"))
        })?;
        let schema: SchemaRef = built.schema();
        decoder.fields = plain_fields(schema.fields());
        Ok(decoder)
    }

    /// The Arrow type of the decoded column (a struct of the reader schema's fields).
    #[getter]
    fn arrow_type(&self) -> PyArrowType<DataType> {
        PyArrowType(DataType::Struct(self.fields.clone()))
    }

    /// Register the writer schema (JSON text) of schema `id`: `None` when records of that id
    /// now decode, else why the reader schema cannot take it here (its records are then
    /// reported in `decode`'s `unsupported`).
    fn add_writer_schema(&mut self, id: u32, schema: &str) -> Option<String> {
        let found = match self.builder(id, schema).build_decoder() {
            Ok(_) => Ok(schema.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let reason = found.as_ref().err().cloned();
        self.writers.insert(id, found);
        reason
    }

    /// The schema ids registered with `add_writer_schema`.
    fn known_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.writers.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Decode a binary column: `(struct column, corrupt, unknown, unsupported)`. `corrupt` is
    /// `(row, reason)` (not wire format, truncated, not of its writer schema), `unknown` is
    /// `(row, schema id)` for ids never registered (null rows, not corrupt: register the
    /// schema and decode again), `unsupported` the rows of ids whose writer schema the reader
    /// schema cannot take here. Null values are null rows and in no list.
    #[allow(clippy::type_complexity)]
    fn decode(
        &self,
        py: Python<'_>,
        values: PyArrowType<ArrayData>,
    ) -> PyResult<(PyArrowType<ArrayData>, Vec<(usize, String)>, Vec<(usize, u32)>, Vec<usize>)> {
        let values = binary_values(&values.0)?;
        let len = values.len();
        py.detach(|| {
            let mut corrupt = Vec::new();
            let mut unknown = Vec::new();
            let mut unsupported = Vec::new();
            let mut by_id: Vec<(u32, Vec<(usize, &[u8])>)> = Vec::new();
            for row in 0..len {
                if values.is_null(row) {
                    continue;
                }
                let bytes = values.value(row);
                if bytes.len() < 6 || bytes[0] != 0 {  // confluent-kafka wants a body too
                    corrupt.push((row, format!(
                        "not in the Schema Registry wire format (a magic byte 0 and a 4-byte \
                         schema id, then the payload): {} bytes starting with {:02x?}",
                        bytes.len(), &bytes[..bytes.len().min(5)])));
                    continue;
                }
                let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                match self.writers.get(&id) {
                    None => unknown.push((row, id)),
                    Some(Err(_)) => unsupported.push(row),
                    Some(Ok(_)) => match by_id.iter_mut().find(|(i, _)| *i == id) {
                        Some((_, records)) => records.push((row, &bytes[5..])),
                        None => by_id.push((id, vec![(row, &bytes[5..])])),
                    },
                }
            }
            let mut out = Segments::new();
            for (id, records) in &by_id {
                let Some(Ok(writer)) = self.writers.get(id) else { continue };
                let build = || self.build(*id, writer);
                decode_run(&build, records, &mut out, &mut corrupt)?;
            }
            corrupt.sort_unstable_by_key(|(row, _)| *row);
            let array = out.assemble(&self.fields, len)?;
            Ok((PyArrowType(array), corrupt, unknown, unsupported))
        })
    }
}
