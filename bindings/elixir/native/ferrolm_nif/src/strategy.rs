//! A batch strategy written in Elixir: each tick the engine thread sends the strategy process
//! `{:ferrolm_plan, seq, slots, budget}` and waits (at most a timeout, then the built-in strategy
//! runs that tick) for `Ferrolm.Native.strategy_reply/4`.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use ferrolm::engine::{CustomStrategy, Demand, Plan};
use rustler::{Encoder, LocalPid, OwnedEnv, ResourceArc, Term};

use crate::atoms;
use crate::stream::atom_map;

/// Where replies go (held by the Elixir side).
pub(crate) struct ReplyRes {
    tx: Mutex<Sender<(u64, Plan)>>,
}

#[rustler::resource_impl]
impl rustler::Resource for ReplyRes {}

/// The engine side of the bridge.
pub(crate) struct ElixirStrategy {
    pid: LocalPid,
    env: OwnedEnv,
    rx: Receiver<(u64, Plan)>,
    seq: u64,
    timeout: Duration,
}

/// A strategy asking `pid`, and the resource its replies go through.
pub(crate) fn bridge(pid: LocalPid, timeout: Duration) -> (ElixirStrategy, ResourceArc<ReplyRes>) {
    let (tx, rx) = channel();
    let reply = ResourceArc::new(ReplyRes { tx: Mutex::new(tx) });
    (ElixirStrategy { pid, env: OwnedEnv::new(), rx, seq: 0, timeout }, reply)
}

impl CustomStrategy for ElixirStrategy {
    fn plan(&mut self, demands: &[Demand], budget: usize) -> Option<Plan> {
        self.seq += 1;
        let seq = self.seq;
        let sent = self.env.send_and_clear(&self.pid, |e| {
            let slots: Vec<Term> = demands
                .iter()
                .map(|d| {
                    atom_map(
                        e,
                        &[
                            ("slot", d.slot.encode(e)),
                            ("decode", d.decode.encode(e)),
                            ("prompt_left", d.prompt_left.encode(e)),
                            ("max_chunk", d.max_chunk.encode(e)),
                            ("order", d.order.encode(e)),
                        ],
                    )
                })
                .collect();
            (atoms::ferrolm_plan(), seq, slots, budget).encode(e)
        });
        if sent.is_err() {
            return None;
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.rx.recv_timeout(left) {
                Ok((s, plan)) if s == seq => return Some(plan),
                Ok(_) => continue,
                Err(_) => {
                    tracing::warn!(
                        seq,
                        "the Elixir batch strategy did not answer in time; using the built-in one"
                    );
                    return None;
                }
            }
        }
    }
}

/// The strategy's answer for tick `seq`: slots to decode and `{slot, n}` prompt chunks.
#[rustler::nif]
fn strategy_reply(
    r: ResourceArc<ReplyRes>,
    seq: u64,
    decode: Vec<usize>,
    prefill: Vec<(usize, usize)>,
) -> rustler::Atom {
    let tx = r.tx.lock().unwrap_or_else(|e| e.into_inner());
    // The engine may be gone; nothing to do then.
    let _ = tx.send((seq, Plan { decode, prefill }));
    atoms::ok()
}
