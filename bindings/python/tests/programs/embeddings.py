# Embeddings, written for llama-cpp-python.
import json
import sys

from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], embedding=True, verbose=False)
response = llm.create_embedding(["Hello, world!", "The cat sat on the mat."])
single = llm.embed("Hello, world!")
print(json.dumps({"response": response, "single": single}))
