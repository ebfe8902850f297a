# A completion with stop strings and echo, written for llama-cpp-python.
import json
import sys

from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=512, seed=42, verbose=False)
output = llm("Q: Name the planets in the solar system? A: ", max_tokens=32, stop=["Q:", "\n"], echo=True)
greedy = llm.create_completion("The capital of France is", max_tokens=16, temperature=0.0)
print(json.dumps({"output": output, "greedy": greedy, "n_ctx": llm.n_ctx()}))
