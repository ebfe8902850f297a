//! The NIF library of the Elixir package `ferrolm` (module `Ferrolm.Native`): a thin layer over
//! the `ferrolm` crate. Models, contexts, servers and stream controls are resources the BEAM's
//! garbage collector frees; anything that can take longer than a millisecond runs on a dirty
//! scheduler or on a Rust thread that sends messages to the caller.

mod context;
mod hub;
mod model;
mod opts;
mod server;
mod strategy;
mod stream;
mod term_json;

/// The atoms the library uses.
pub(crate) mod atoms {
    rustler::atoms! {
    ok,
    error,
    nil,
    token,
    done,
    queue_full,
    ferrolm_stream,
    ferrolm_plan,
    ferrolm_tick,
    progress,
    pulled,
    }
}

/// An error returned to Elixir as `{:error, message}`.
pub(crate) fn err(msg: impl std::fmt::Display) -> rustler::Error {
    rustler::Error::Term(Box::new(msg.to_string()))
}

rustler::init!("Elixir.Ferrolm.Native");
