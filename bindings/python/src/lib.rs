//! `ferrolm._ferrolm`: the native module of the `ferrolm` Python package.
//!
//! A thin layer over the library: [`model::PyModel`] wraps `ferrolm::model::Model`,
//! [`session::PySession`] a `ferrolm::session::Session` (one user, KV reuse across calls) and
//! [`engine::PyEngine`] a `ferrolm::engine::Engine` (many users, continuous batching). The
//! llama-cpp-python compatible `Llama` class and the asyncio helpers are Python code
//! (`python/ferrolm/`) over these classes. The GIL is released around every forward pass and
//! every blocking wait; generation loops check for signals (Ctrl-C) between tokens.

mod engine;
mod errors;
mod model;
mod params;
mod session;

use pyo3::prelude::*;

/// Sizes the worker pool that forward passes run on (`None`: one thread per physical core).
#[pyfunction]
#[pyo3(signature = (n_threads=None))]
fn set_num_threads(py: Python<'_>, n_threads: Option<usize>) -> PyResult<()> {
    py.allow_threads(|| ferrolm::threads::init(n_threads)).map_err(errors::to_py)
}

/// The path of a catalog model (downloading it with pip unless it is cached), or of an existing
/// file or folder given as is.
#[pyfunction]
fn resolve_model(py: Python<'_>, name_or_path: String) -> PyResult<String> {
    let path = py
        .allow_threads(|| ferrolm::hub::resolve(Some(&name_or_path), &mut |_| {}))
        .map_err(|e| errors::to_py(ferrolm::Error::from(e)))?;
    Ok(path.to_string_lossy().into_owned())
}

/// The catalog: `(name, file_name, description)` of each model `resolve_model` knows by name.
#[pyfunction]
fn catalog() -> Vec<(String, String, String)> {
    ferrolm::hub::catalog()
        .iter()
        .map(|e| (e.name.to_string(), e.file_name.to_string(), e.description.to_string()))
        .collect()
}

#[pymodule]
fn _ferrolm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::PyModel>()?;
    m.add_class::<params::PyGenParams>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<session::PyToken>()?;
    m.add_class::<session::PyFinish>()?;
    m.add_class::<session::PyStream>()?;
    m.add_class::<session::PyCancelHandle>()?;
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<engine::PyRequest>()?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_model, m)?)?;
    m.add_function(wrap_pyfunction!(catalog, m)?)?;
    Ok(())
}
