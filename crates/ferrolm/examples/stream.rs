//! Streams a completion of a prompt, token by token.
//!
//! `cargo run --release -p ferrolm --example stream -- MODEL.gguf "The capital of France is"`

use std::io::Write;

use ferrolm::model::Model;
use ferrolm::session::{GenerateParams, Session, SessionOptions, StreamEvent};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: stream MODEL PROMPT")?;
    let prompt = args.next().unwrap_or_else(|| "Once upon a time".to_string());

    let model = Model::load(&path)?;
    let mut session = Session::new(&model, SessionOptions::default())?;
    let params = GenerateParams { max_tokens: Some(64), ..GenerateParams::default() };
    print!("{prompt}");
    for event in session.stream(&prompt, &params)? {
        match event? {
            StreamEvent::Token { text, .. } => print!("{text}"),
            StreamEvent::Finished { text, reason, stats } => {
                println!("{text}");
                eprintln!(
                    "[{} tokens, {:.1} tokens/s, stopped by {}]",
                    stats.n_generated,
                    stats.decode_tps(),
                    reason.as_str()
                );
            }
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}
