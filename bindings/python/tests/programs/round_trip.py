# A tokenize/detokenize round trip, written for llama-cpp-python.
import json
import sys

from llama_cpp import Llama

llm = Llama(model_path=sys.argv[1], n_ctx=256, verbose=False)
text = "Hello, world! Ünïcödé text, numbers 12345 and\nnew lines."
tokens = llm.tokenize(text.encode("utf-8"), add_bos=False)
with_bos = llm.tokenize(text.encode("utf-8"), add_bos=True)
special = llm.tokenize(b"<|im_start|>user", add_bos=False, special=True)
back = llm.detokenize(tokens).decode("utf-8")
print(json.dumps({
    "tokens": tokens, "with_bos": with_bos, "back": back, "text": text, "special": special,
    "bos": llm.token_bos(), "eos": llm.token_eos(), "n_vocab": llm.n_vocab(),
}))
