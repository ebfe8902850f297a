defmodule Ferrolm.ApiTest do
  use ExUnit.Case, async: false
  @moduletag :model

  alias Ferrolm.{Model, Tokenizer, TestModels, Thinking}

  setup_all do
    {:ok, smol} = Ferrolm.load_model(TestModels.path(TestModels.smol()))
    {:ok, gemma} = Ferrolm.load_model(TestModels.path(TestModels.gemma()))
    {:ok, smol: smol, gemma: gemma}
  end

  test "model facts", %{smol: m, gemma: g} do
    assert Ferrolm.init() == :ok
    assert Model.n_embd(m) == 576
    assert Model.n_params(m) > 100_000_000 and Model.n_params(m) < 200_000_000
    assert Model.size(m) > 50_000_000
    assert Model.n_ctx_train(m) >= 2048
    assert Model.desc(m) =~ "llama"
    assert Model.chat_template(m) =~ "im_start"
    assert Model.desc(g) =~ "gemma"
  end

  test "tokenizer round trip and special tokens", %{smol: m} do
    {:ok, ids} = Tokenizer.encode(m, "Hello world")
    assert {:ok, "Hello world"} = Tokenizer.decode(m, ids)
    assert Enum.map_join(ids, &Tokenizer.token_to_piece(m, &1)) == "Hello world"
    {:ok, [im_start]} = Tokenizer.encode(m, "<|im_start|>", add_special: false)
    {:ok, plain} = Tokenizer.encode(m, "<|im_start|>", add_special: false, parse_special: false)
    assert length(plain) > 1 and im_start not in plain
    assert Tokenizer.vocab_size(m) == 49_152
    eos = Tokenizer.eos_token(m)
    assert is_integer(eos) and Tokenizer.eog?(m, eos)
    refute Tokenizer.eog?(m, hd(ids))
    assert {:error, msg} = Tokenizer.decode(m, [10_000_000])
    assert msg =~ "out of range"
  end

  test "chat with the model's template on both models", %{smol: m, gemma: g} do
    msgs = [%{role: "system", content: "You are terse."}, %{"role" => "user", "content" => "What is the capital of France?"}]
    {:ok, smol_prompt, _} = Ferrolm.chat_tokens(m, msgs, [])
    assert smol_prompt == "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"

    # Gemma 3 270M (a base model) has no template: the caller gives one.
    assert {:error, "the model has no chat template" <> _} = Ferrolm.chat(g, msgs)
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"

    for {model, opts} <- [{m, []}, {g, [chat_template: plain]}] do
      {:ok, text} = Ferrolm.chat(model, msgs, [max_tokens: 24, temp: 0.0] ++ opts)
      assert String.trim(text) != ""
      # The reply is the generation from the rendered prompt's tokens.
      {:ok, prompt, tokens} = Ferrolm.chat_tokens(model, msgs, opts)
      assert prompt =~ "What is the capital of France?"
      assert {:ok, text} == Ferrolm.generate(model, tokens, max_tokens: 24, temp: 0.0)
      assert Enum.join(Ferrolm.stream_chat(model, msgs, [max_tokens: 24, temp: 0.0] ++ opts)) == text
    end
  end

  test "chat_completion and stream_chat_completion in OpenAI's shape", %{smol: m} do
    msgs = [%{role: "user", content: "Say hello."}]
    {:ok, c} = Ferrolm.chat_completion(m, msgs, max_tokens: 16, temp: 0.0)
    assert %Ferrolm.ChatCompletion{object: "chat.completion", choices: [%{index: 0, message: %{role: "assistant", content: content}, finish_reason: fr}]} = c
    assert fr in ["stop", "length"]
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens

    chunks = Ferrolm.stream_chat_completion(m, msgs, max_tokens: 16, temp: 0.0) |> Enum.to_list()
    assert [%Ferrolm.ChatCompletionChunk{choices: [%{delta: %{role: "assistant"}}]} | _] = chunks
    assert %{choices: [%{finish_reason: ^fr}], usage: %{completion_tokens: n}} = List.last(chunks)
    assert n == c.usage.completion_tokens
    assert Enum.map_join(chunks, fn ch -> hd(ch.choices).delta[:content] || "" end) == content
  end

  test "template kwargs reach the template", %{smol: m} do
    template = "{% if shout %}LOUD {% endif %}{{ messages[0]['content'] }}"
    {:ok, prompt, _} = Ferrolm.chat_tokens(m, [%{role: "user", content: "hi"}], chat_template: template, chat_template_kwargs: %{shout: true})
    assert prompt == "LOUD hi"
    {:ok, prompt, _} = Ferrolm.chat_tokens(m, [%{role: "user", content: "hi"}], chat_template: "{{ enable_thinking }}", enable_thinking: false)
    assert prompt == "False"
  end

  test "reranking with a Qwen3-Reranker GGUF; other models cannot", %{smol: smol} do
    dir = Path.expand("../../../crates/ferrolm/tests/fixtures/rerank/qwen3-reranker", __DIR__)
    {:ok, m} = Ferrolm.load_model(Path.join(dir, "model.gguf"))
    assert Ferrolm.reranker?(m)
    # The first query of the fixture's expected.json, with transformers' scores.
    docs = [
      "Paris is the capital and largest city of France.",
      "Berlin is the capital of Germany.",
      "The Eiffel Tower was built in 1889.",
      "Bananas are rich in potassium."
    ]
    {:ok, scores} = Ferrolm.rerank(m, "What is the capital of France?", docs)
    for {got, want} <- Enum.zip(scores, [0.4831232, 0.5982962, 0.3370223, 0.0388244]), do: assert(abs(got - want) < 1.0e-2)
    ranking = scores |> Enum.with_index() |> Enum.sort_by(fn {s, _} -> -s end) |> Enum.map(&elem(&1, 1))
    assert ranking == [1, 0, 2, 3]
    refute Ferrolm.reranker?(smol)
    assert {:error, msg} = Ferrolm.rerank(smol, "q", ["d"])
    assert msg =~ "cannot rerank"
  end

  test "embeddings: normalised, batched like alone, pooling", %{smol: m} do
    {:ok, v} = Ferrolm.embed(m, "hello world")
    assert length(v) == 576
    assert_in_delta Enum.reduce(v, 0.0, &(&1 * &1 + &2)), 1.0, 1.0e-4
    {:ok, [a, _b]} = Ferrolm.embed_batch(m, ["hello world", "something else"])
    assert Enum.zip(a, v) |> Enum.all?(fn {x, y} -> abs(x - y) < 1.0e-4 end)
    {:ok, raw} = Ferrolm.embed(m, "hello world", normalize: false, pooling_type: :last)
    refute_in_delta Enum.reduce(raw, 0.0, &(&1 * &1 + &2)), 1.0, 1.0e-3
  end

  test "constrained output: json_schema, Lark and GBNF grammars", %{smol: m} do
    schema = %{type: "object", properties: %{name: %{type: "string"}}, required: ["name"], additionalProperties: false}
    {:ok, json} = Ferrolm.generate(m, "A person as JSON:", json_schema: schema, max_tokens: 40, temp: 0.0)
    assert json =~ ~r/^\{\s*"name"\s*:\s*".*"\s*\}$/s
    {:ok, grammar} = Ferrolm.Grammar.from_json_schema(schema)
    {:ok, json2} = Ferrolm.generate(m, "A person as JSON:", grammar: grammar, max_tokens: 40, temp: 0.0)
    assert json2 =~ ~r/^\{\s*"name"\s*:\s*".*"\s*\}$/s
    {:ok, yes_no} = Ferrolm.generate(m, "Is water wet?", grammar: ~S(start: "yes" | "no"), temp: 0.0)
    assert yes_no in ["yes", "no"]
    {:ok, gbnf} = Ferrolm.generate(m, "Is water wet?", grammar: ~S[root ::= ("yes" | "no") "."], temp: 0.0)
    assert gbnf in ["yes.", "no."]
    assert {:error, msg} = Ferrolm.generate(m, "x", grammar: ~S(root ::= "a))
    assert msg =~ "GBNF: line 1"
  end

  test "bad input raises ArgumentError or returns a clear error", %{smol: m} do
    assert {:error, "no such file" <> _} = Ferrolm.load_model("/nonexistent/model.gguf")
    assert {:error, msg} = Ferrolm.load_model(__ENV__.file)
    assert is_binary(msg)
    assert_raise ArgumentError, fn -> Ferrolm.load_model(:not_a_path) end
    assert_raise ArgumentError, ~r/temp/, fn -> Ferrolm.generate(m, "x", temp: "hot") end
    assert_raise ArgumentError, ~r/unknown option/, fn -> Ferrolm.generate(m, "x", temperature: 0.5) end
    assert_raise ArgumentError, fn -> Ferrolm.generate(m, 42) end
    assert_raise ArgumentError, ~r/not both/, fn -> Ferrolm.stream(m, "x", grammar: "start: \"a\"", json_schema: %{}) |> Enum.to_list() end
    assert_raise ArgumentError, ~r/kv_policy/, fn -> Ferrolm.Context.create(m, kv_policy: :random) end
    assert {:error, msg} = Ferrolm.Context.create(m, type_k: :q9_9)
    assert msg =~ "type_k"
    assert_raise ArgumentError, ~r/messages/, fn -> Ferrolm.chat(m, "hi") end
  end

  test "KV eviction: a sliding window lets a small context generate past its size", %{smol: m} do
    {:ok, ctx} = Ferrolm.Context.create(m, n_ctx: 64, kv_policy: :sliding, kv_window: 32, kv_protected_prefix: 4)
    {:ok, text} = Ferrolm.generate(ctx, "Once upon a time", max_tokens: 100, temp: 0.8, seed: 1, ignore_eos: true)
    assert String.length(text) > 100
    {:ok, small} = Ferrolm.Context.create(m, n_ctx: 64)
    {:ok, _} = Ferrolm.generate(small, "Once upon a time", max_tokens: 100, ignore_eos: true)
    assert Ferrolm.Context.n_tokens(small) <= 64
  end

  test "Thinking splits reasoning from the answer, also incrementally" do
    text = "<think>\nLet me see.\n</think>\n\nParis."
    assert Thinking.parse(text) == {"Let me see.", "Paris."}
    assert Thinking.parse("Paris.") == {nil, "Paris."}
    assert Thinking.parse("hmm</think>Paris.") == {"hmm", "Paris."}

    for size <- 1..8 do
      pieces = for <<chunk::binary-size(size) <- text>>, do: chunk
      rest = binary_part(text, size * length(pieces), byte_size(text) - size * length(pieces))
      parts = Thinking.stream(pieces ++ [rest]) |> Enum.to_list()
      reasoning = for {:reasoning, t} <- parts, into: "", do: t
      content = for {:content, t} <- parts, into: "", do: t
      assert {String.trim(reasoning), String.trim_leading(content)} == {"Let me see.", "Paris."}, "pieces of #{size}"
    end
  end

  test "Sampler: options are checked; the same seed gives the same text", %{smol: m} do
    {:ok, s} = Ferrolm.Sampler.create(m, temp: 0.9, top_k: 40, seed: 42)
    {:ok, ctx} = Ferrolm.Context.create(m)
    {:ok, a} = Ferrolm.Context.generate(ctx, s, "Once upon a time", max_tokens: 16)
    {:ok, b} = Ferrolm.Context.generate(ctx, Ferrolm.Sampler.reset(s), "Once upon a time", max_tokens: 16)
    assert a == b
    assert_raise ArgumentError, fn -> Ferrolm.Sampler.create(m, top_k: -1) end
  end
end
