//! A librdkafka client handle built from a Python dict of string settings, the errors
//! librdkafka reports through `error_cb`, and librdkafka errors as Python exceptions.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdkafka_sys as rd;

/// librdkafka's `RD_KAFKA_RESP_ERR__INVALID_ARG`: the code of a refused setting.
pub const ERR_INVALID_ARG: i32 = -186;
/// librdkafka's `RD_KAFKA_RESP_ERR__QUEUE_FULL`.
pub const ERR_QUEUE_FULL: i32 = -184;

/// `error_cb` reports kept per client: the first ones tell what went wrong.
const MAX_KEPT_ERRORS: usize = 32;

pub fn librdkafka_version() -> String {
    unsafe { CStr::from_ptr(rd::rd_kafka_version_str()) }.to_string_lossy().into_owned()
}

/// What librdkafka's callbacks report to a client, read by the Python side when it asks.
#[derive(Default)]
pub struct ClientState {
    /// `(code, reason)` of the first `error_cb` reports not yet taken.
    pub errors: Mutex<Vec<(i32, String)>>,
    /// Delivery reports of a producer.
    pub delivery: Mutex<DeliveryState>,
}

/// A producer's failed delivery reports: how many, and the first one.
#[derive(Default)]
pub struct DeliveryState {
    pub failed: u64,
    /// `(code, reason, topic, partition)` of the first failure.
    pub first_failure: Option<(i32, String, String, i32)>,
}

/// An owned `rd_kafka_t` and the state its callbacks write to.
pub struct Client {
    pub rk: *mut rd::rd_kafka_t,
    // Boxed: librdkafka holds its address as the callbacks' opaque; dropped after `rk`.
    pub state: Box<ClientState>,
}

// librdkafka handles are thread-safe; the state is behind mutexes.
unsafe impl Send for Client {}
unsafe impl Sync for Client {}

/// A raw pointer that may cross into a closure that runs without the GIL.
#[derive(Clone, Copy)]
pub struct Shared<T>(pub *mut T);
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so that a closure captures the whole `Shared`).
    pub fn ptr(self) -> *mut T {
        self.0
    }
}

unsafe extern "C" fn on_error(
    _rk: *mut rd::rd_kafka_t,
    err: c_int,
    reason: *const c_char,
    opaque: *mut c_void,
) {
    if opaque.is_null() {
        return;
    }
    let state = &*(opaque as *const ClientState);
    let reason = if reason.is_null() {
        String::new()
    } else {
        CStr::from_ptr(reason).to_string_lossy().into_owned()
    };
    if let Ok(mut errors) = state.errors.lock() {
        if errors.len() < MAX_KEPT_ERRORS {
            errors.push((err, reason));
        }
    }
}

unsafe extern "C" fn on_delivery(
    _rk: *mut rd::rd_kafka_t,
    message: *const rd::rd_kafka_message_t,
    opaque: *mut c_void,
) {
    if opaque.is_null() || message.is_null() {
        return;
    }
    let message = &*message;
    let code = message.err as i32;
    if code == 0 {
        return;
    }
    let state = &*(opaque as *const ClientState);
    if let Ok(mut delivery) = state.delivery.lock() {
        delivery.failed += 1;
        if delivery.first_failure.is_none() {
            let reason = cstr(rd::rd_kafka_err2str(message.err));
            let topic = if message.rkt.is_null() {
                String::new()
            } else {
                cstr(rd::rd_kafka_topic_name(message.rkt))
            };
            delivery.first_failure = Some((code, reason, topic, message.partition));
        }
    }
}

/// A C string as an owned Rust string (empty for NULL).
pub unsafe fn cstr(ptr: *const c_char) -> String {
    if ptr.is_null() {
        String::new()
    } else {
        CStr::from_ptr(ptr).to_string_lossy().into_owned()
    }
}

impl Client {
    /// A client of `kind` from `config` (setting -> string value). With `delivery_reports`,
    /// failed deliveries are counted in [`ClientState::delivery`].
    ///
    /// Raises `KafkaException(KafkaError(_INVALID_ARG, librdkafka's message))` for a setting
    /// librdkafka does not know or refuses, as confluent-kafka does.
    pub fn new(
        py: Python<'_>,
        kind: rd::rd_kafka_type_t,
        config: &Bound<'_, PyDict>,
        delivery_reports: bool,
    ) -> PyResult<Client> {
        let mut settings: Vec<(String, String)> = Vec::with_capacity(config.len());
        for (key, value) in config.iter() {
            settings.push((key.extract::<String>()?, value.extract::<String>()?));
        }
        let state = Box::new(ClientState::default());
        unsafe {
            let conf = rd::rd_kafka_conf_new();
            for (key, value) in &settings {
                if let Err(message) = set(conf, key, value) {
                    rd::rd_kafka_conf_destroy(conf);
                    return Err(kafka_exception(py, ERR_INVALID_ARG, &message, false, false, false));
                }
            }
            rd::rd_kafka_conf_set_opaque(conf, &*state as *const ClientState as *mut c_void);
            rd::rd_kafka_conf_set_error_cb(conf, Some(on_error));
            if delivery_reports {
                rd::rd_kafka_conf_set_dr_msg_cb(conf, Some(on_delivery));
            }
            let mut errstr = [0 as c_char; 512];
            let rk = rd::rd_kafka_new(kind, conf, errstr.as_mut_ptr(), errstr.len());
            if rk.is_null() {
                rd::rd_kafka_conf_destroy(conf);
                let message = cstr(errstr.as_ptr());
                return Err(kafka_exception(py, ERR_INVALID_ARG, &message, false, false, false));
            }
            Ok(Client { rk, state })
        }
    }

    /// The `error_cb` reports since the last call, oldest first.
    pub fn take_errors(&self) -> Vec<(i32, String)> {
        match self.state.errors.lock() {
            Ok(mut errors) => std::mem::take(&mut *errors),
            Err(_) => Vec::new(),
        }
    }

    pub fn shared(&self) -> Shared<rd::rd_kafka_t> {
        Shared(self.rk)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        unsafe { rd::rd_kafka_destroy(self.rk) };
    }
}

unsafe fn set(conf: *mut rd::rd_kafka_conf_t, key: &str, value: &str) -> Result<(), String> {
    let (Ok(name), Ok(text)) = (CString::new(key), CString::new(value)) else {
        return Err(format!("Configuration property \"{key}\" contains a NUL character"));
    };
    let mut errstr = [0 as c_char; 512];
    let result = rd::rd_kafka_conf_set(conf, name.as_ptr(), text.as_ptr(), errstr.as_mut_ptr(),
                                       errstr.len());
    if result == rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
        Ok(())
    } else {
        Err(cstr(errstr.as_ptr()))
    }
}

/// `confluent_kafka.KafkaException(KafkaError(code, reason, ...))`: the exception the package
/// handles for every librdkafka error, whichever client raised it.
pub fn kafka_exception(
    py: Python<'_>,
    code: i32,
    reason: &str,
    fatal: bool,
    retriable: bool,
    txn_requires_abort: bool,
) -> PyErr {
    let built = (|| -> PyResult<PyErr> {
        let module = py.import("confluent_kafka")?;
        let error = module
            .getattr("KafkaError")?
            .call1((code, reason, fatal, retriable, txn_requires_abort))?;
        let exception = module.getattr("KafkaException")?.call1((error,))?;
        Ok(PyErr::from_value(exception))
    })();
    built.unwrap_or_else(|err| err)
}

/// The exception of an `rd_kafka_error_t` (which this call destroys).
pub unsafe fn error_exception(py: Python<'_>, error: *mut rd::rd_kafka_error_t) -> PyErr {
    let code = rd::rd_kafka_error_code(error) as i32;
    let reason = cstr(rd::rd_kafka_error_string(error));
    let fatal = rd::rd_kafka_error_is_fatal(error) != 0;
    let retriable = rd::rd_kafka_error_is_retriable(error) != 0;
    let abort = rd::rd_kafka_error_txn_requires_abort(error) != 0;
    rd::rd_kafka_error_destroy(error);
    kafka_exception(py, code, &reason, fatal, retriable, abort)
}

/// Milliseconds for librdkafka from seconds (negative: wait forever).
pub fn millis(seconds: f64) -> c_int {
    if seconds < 0.0 {
        -1
    } else {
        (seconds * 1000.0).min(c_int::MAX as f64) as c_int
    }
}
