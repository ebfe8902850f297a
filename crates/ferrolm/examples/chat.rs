//! A two-turn chat with the model's own chat template; the second turn reuses the KV cache.
//!
//! `cargo run --release -p ferrolm --example chat -- MODEL.gguf`

use ferrolm::chat::Message;
use ferrolm::model::Model;
use ferrolm::session::{ChatSession, GenerateParams, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: chat MODEL")?;
    let model = Model::load(&path)?;
    let mut chat = ChatSession::new(&model, SessionOptions::default())?;
    chat.push(Message::system("You are a helpful assistant. Answer in one sentence."));
    let params = GenerateParams { max_tokens: Some(80), ..GenerateParams::default() };
    for question in ["What is the capital of France?", "And what is it famous for?"] {
        let reply = chat.send(question, &params)?;
        println!("> {question}\n{}", reply.text.trim());
        eprintln!("[prefilled {} new tokens, {} reused]", reply.stats.n_prefilled, reply.stats.n_cached);
    }
    Ok(())
}
