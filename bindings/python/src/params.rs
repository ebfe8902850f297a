//! [`PyGenParams`]: the options of one generation, built once in Python and passed to
//! `Session.generate`/`stream` and `Engine.submit`.

use pyo3::prelude::*;

use ferrolm::constrain::ConstraintSpec;
use ferrolm::decoder::GenerateParams;
use ferrolm::sampling::{SamplerParams, SamplerStep};

use crate::errors::{Kind, new_err};

/// Options of one generation: limits, stop strings, the sampler chain (llama.cpp's knobs and
/// defaults) and an optional constraint (a JSON schema, any JSON object, a Lark or GBNF grammar
/// or a regular expression).
#[pyclass(name = "GenParams", module = "ferrolm._ferrolm", frozen)]
#[derive(Clone, Debug)]
pub struct PyGenParams {
    pub(crate) params: GenerateParams,
}

/// At most one constraint of the five kinds.
fn constraint(
    json_schema: Option<String>,
    json_object: bool,
    lark: Option<String>,
    gbnf: Option<String>,
    regex: Option<String>,
) -> PyResult<Option<ConstraintSpec>> {
    let mut specs = Vec::new();
    if let Some(s) = json_schema {
        let value = serde_json::from_str(&s)
            .map_err(|e| new_err(Kind::Invalid, format!("json_schema is not valid JSON: {e}")))?;
        specs.push(ConstraintSpec::JsonSchema(value));
    }
    if json_object {
        specs.push(ConstraintSpec::JsonObject);
    }
    specs.extend(lark.map(ConstraintSpec::Lark));
    specs.extend(gbnf.map(ConstraintSpec::Gbnf));
    specs.extend(regex.map(ConstraintSpec::Regex));
    if specs.len() > 1 {
        return Err(new_err(
            Kind::Invalid,
            "give at most one of json_schema, json_object, lark, gbnf and regex",
        ));
    }
    Ok(specs.pop())
}

#[pymethods]
impl PyGenParams {
    /// Builds and checks the options (a bad value raises `ValueError` naming it).
    #[new]
    #[pyo3(signature = (
        *, max_tokens=None, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0,
        repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=64,
        mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1, logit_bias=None, seed=None,
        stop=None, ignore_eos=false, json_schema=None, json_object=false, lark=None, gbnf=None, regex=None,
        samplers=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_tokens: Option<usize>,
        temperature: f32,
        top_k: i64,
        top_p: f32,
        min_p: f32,
        typical_p: f32,
        repeat_penalty: f32,
        frequency_penalty: f32,
        presence_penalty: f32,
        penalty_last_n: i32,
        mirostat_mode: u8,
        mirostat_tau: f32,
        mirostat_eta: f32,
        logit_bias: Option<Vec<(u32, f32)>>,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        ignore_eos: bool,
        json_schema: Option<String>,
        json_object: bool,
        lark: Option<String>,
        gbnf: Option<String>,
        regex: Option<String>,
        samplers: Option<String>,
    ) -> PyResult<Self> {
        let order = match samplers {
            Some(s) => SamplerStep::parse_order(&s).map_err(crate::errors::to_py)?,
            None => SamplerStep::DEFAULT_ORDER.to_vec(),
        };
        if mirostat_mode > 2 {
            return Err(new_err(
                Kind::Invalid,
                format!("mirostat_mode must be 0, 1 or 2, not {mirostat_mode}"),
            ));
        }
        let sampler = SamplerParams {
            temperature,
            // llama-cpp-python's top_k <= 0 means "off", as 0 does here.
            top_k: top_k.max(0) as usize,
            top_p,
            min_p,
            typical_p,
            repeat_penalty,
            frequency_penalty,
            presence_penalty,
            penalty_last_n,
            mirostat: mirostat_mode,
            mirostat_tau,
            mirostat_eta,
            logit_bias: logit_bias.unwrap_or_default(),
            seed,
            order,
            ..SamplerParams::default()
        };
        sampler.validate().map_err(crate::errors::to_py)?;
        let stop = stop.unwrap_or_default().into_iter().filter(|s| !s.is_empty()).collect();
        let constraint = constraint(json_schema, json_object, lark, gbnf, regex)?;
        Ok(Self {
            params: GenerateParams {
                max_tokens,
                sampler,
                stop,
                ignore_eos,
                constraint,
                reasoning_budget: None,
            },
        })
    }

    /// The most tokens to generate (`None`: until the end of generation or a full context).
    #[getter]
    fn max_tokens(&self) -> Option<usize> {
        self.params.max_tokens
    }

    /// The temperature (≤ 0: greedy).
    #[getter]
    fn temperature(&self) -> f32 {
        self.params.sampler.temperature
    }

    /// The seed (`None`: a new one from the OS for each generation).
    #[getter]
    fn seed(&self) -> Option<u64> {
        self.params.sampler.seed
    }

    fn __repr__(&self) -> String {
        format!("GenParams({:?})", self.params)
    }
}
