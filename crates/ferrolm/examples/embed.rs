//! Embeds a few sentences and prints their cosine similarities.
//!
//! `cargo run --release -p ferrolm --example embed -- MODEL.gguf`

use ferrolm::model::{Model, Pooling};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: embed MODEL")?;
    let model = Model::load(&path)?;
    let texts =
        ["The cat sat on the mat.", "A kitten rested on the rug.", "Stock markets fell sharply today."];
    let vectors = model.embed(&texts, Pooling::Mean, true)?;
    for (i, a) in vectors.iter().enumerate() {
        for (j, b) in vectors.iter().enumerate().skip(i + 1) {
            let cos: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            println!("{cos:+.3}  {:?} ~ {:?}", texts[i], texts[j]);
        }
    }
    Ok(())
}
