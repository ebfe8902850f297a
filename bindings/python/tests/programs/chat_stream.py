# A streamed chat reply, written for llama-cpp-python.
import json
import sys

from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=1024, verbose=False)
chunks = []
for chunk in llm.create_chat_completion(
    messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write one sentence about the sea."},
    ],
    stream=True,
    max_tokens=48,
    temperature=0.0,
):
    chunks.append(chunk)
reply = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
whole = llm.create_chat_completion(
    messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write one sentence about the sea."},
    ],
    max_tokens=48,
    temperature=0.0,
)
print(json.dumps({"chunks": chunks, "reply": reply, "whole": whole}))
