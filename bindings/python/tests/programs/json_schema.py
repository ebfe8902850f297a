# A chat reply constrained to a JSON schema, written for llama-cpp-python.
import json
import sys

from llama_cpp import Llama

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        # Bounded, so the reply fits max_tokens whatever is sampled.
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

llm = Llama(model_path=sys.argv[1], n_ctx=1024, seed=7, verbose=False)
result = llm.create_chat_completion(
    messages=[
        {"role": "system", "content": "You answer in JSON."},
        {"role": "user", "content": "Invent a person with a name and an age."},
    ],
    response_format={"type": "json_object", "schema": SCHEMA},
    temperature=0.7,
    max_tokens=64,
)
print(json.dumps({"result": result, "schema": SCHEMA}))
