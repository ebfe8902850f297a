//! Library errors as Python exceptions. The classes live in `ferrolm/errors.py` so that they can
//! derive from both `ferrolm.Error` and the built-in they refine (`ValueError`,
//! `FileNotFoundError`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;

use ferrolm::Error;
use ferrolm::engine::{EngineError, SubmitError};

/// Which exception class of `ferrolm.errors` an error becomes.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// `ferrolm.Error`: the model or the engine failed.
    Error,
    /// `ferrolm.InvalidInputError` (a `ValueError`): bad arguments, prompt, schema, template.
    Invalid,
    /// `ferrolm.ModelNotFoundError` (a `FileNotFoundError`).
    NotFound,
    /// `ferrolm.EngineBusyError`: the engine's queue is full.
    Busy,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Error => "Error",
            Kind::Invalid => "InvalidInputError",
            Kind::NotFound => "ModelNotFoundError",
            Kind::Busy => "EngineBusyError",
        }
    }
}

/// A Python exception of `kind` with `message`.
pub(crate) fn new_err(kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::with_gil(|py| match class(py, kind) {
        Ok(cls) => PyErr::from_type(cls, message),
        Err(e) => PyRuntimeError::new_err(format!("{message} (and ferrolm.errors failed to import: {e})")),
    })
}

fn class(py: Python<'_>, kind: Kind) -> PyResult<Bound<'_, PyType>> {
    static MODULE: GILOnceCell<Py<PyModule>> = GILOnceCell::new();
    let module = MODULE.get_or_try_init(py, || py.import("ferrolm.errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(kind.class_name())?.downcast_into::<PyType>()?)
}

/// The full message of an error: its own and those of its sources.
fn message(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_msg = s.to_string();
        if !msg.contains(&s_msg) {
            msg = format!("{msg}: {s_msg}");
        }
        source = s.source();
    }
    msg
}

/// A library error as a Python exception.
pub(crate) fn to_py(e: Error) -> PyErr {
    let kind = match &e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Kind::NotFound,
        Error::Hub(ferrolm::hub::HubError::UnknownModel { .. }) => Kind::NotFound,
        Error::InvalidInput(_) | Error::Tokenizer(_) | Error::Chat(_) | Error::Constrain(_) => Kind::Invalid,
        _ => Kind::Error,
    };
    new_err(kind, message(&e))
}

/// An error of `Engine.submit` as a Python exception.
pub(crate) fn submit_to_py(e: SubmitError) -> PyErr {
    let kind = match e {
        SubmitError::QueueFull { .. } => Kind::Busy,
        SubmitError::ShuttingDown => Kind::Error,
        SubmitError::ContextLength { .. }
        | SubmitError::Invalid(_)
        | SubmitError::Constraint(_)
        | SubmitError::NotGenerative(_) => Kind::Invalid,
    };
    new_err(kind, e.to_string())
}

/// An error of the engine as a Python exception.
pub(crate) fn engine_to_py(e: EngineError) -> PyErr {
    match e {
        EngineError::Model(e) => to_py(e),
        EngineError::Config(m) => new_err(Kind::Invalid, format!("invalid engine configuration: {m}")),
        EngineError::Stopped => new_err(Kind::Error, "the engine has stopped"),
        EngineError::InvalidSlot(_) => new_err(Kind::Invalid, e.to_string()),
    }
}
