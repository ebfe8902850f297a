//! Fuzz target: a request body through the server's router and validation, without a model.
//! The first byte picks the route (`% 3`: chat completions, completions, embeddings); the rest is
//! the JSON body. `ferrolm_server::api::fuzzing::request` panics (the fuzzer's crash) on a 500 or
//! on an error body that is not an OpenAI-style JSON error; any other answer is fine.
#![no_main]

use ferrolm_server::api::fuzzing::{ROUTES, request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let route = ROUTES[usize::from(pick) % ROUTES.len()];
    let (status, bytes) = request(route, body);
    std::hint::black_box((status, bytes.len()));
});
