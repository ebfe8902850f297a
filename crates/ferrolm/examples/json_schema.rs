//! Sampled output constrained to a JSON schema: always valid JSON that matches it.
//!
//! `cargo run --release -p ferrolm --example json_schema -- MODEL.gguf`

use ferrolm::chat::Message;
use ferrolm::constrain::ConstraintSpec;
use ferrolm::model::Model;
use ferrolm::session::{ChatSession, GenerateParams, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: json_schema MODEL")?;
    let model = Model::load(&path)?;
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 15}, "maxItems": 3}
        },
        "required": ["name", "age", "hobbies"],
        "additionalProperties": false
    });
    let mut chat = ChatSession::new(&model, SessionOptions::default())?;
    chat.push(Message::system("You answer in JSON."));
    let params = GenerateParams {
        max_tokens: Some(150),
        constraint: Some(ConstraintSpec::JsonSchema(schema)),
        ..GenerateParams::default()
    };
    let reply = chat.send("Invent a person.", &params)?;
    let value: serde_json::Value = serde_json::from_str(&reply.text)?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}
