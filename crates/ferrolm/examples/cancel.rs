//! Cancels a generation from another thread after half a second.
//!
//! `cargo run --release -p ferrolm --example cancel -- MODEL.gguf`

use std::time::Duration;

use ferrolm::model::Model;
use ferrolm::session::{GenerateParams, Session, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: cancel MODEL")?;
    let model = Model::load(&path)?;
    let mut session = Session::new(&model, SessionOptions::default())?;
    let handle = session.cancel_handle();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        handle.cancel();
    });
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::default() };
    let out = session.generate("Here is a very long story about dragons:", &params)?;
    println!(
        "{}\n[stopped by {} after {} tokens]",
        out.text,
        out.stats.finish.as_str(),
        out.stats.n_generated
    );
    Ok(())
}
