defmodule Ferrolm.GenerateTest do
  use ExUnit.Case, async: false
  @moduletag :model

  alias Ferrolm.{Context, TestModels}

  @prompts ["The capital of France is", "Once upon a time, in a small village,"]

  setup_all do
    models =
      for name <- [TestModels.smol(), TestModels.gemma()], into: %{} do
        {:ok, m} = Ferrolm.load_model(TestModels.path(name))
        {name, m}
      end

    {:ok, models: models}
  end

  defp cli_greedy(name, prompt, n) do
    args = ["generate", "-m", TestModels.path(name), "-p", prompt, "-n", "#{n}", "--temp", "0", "--no-display-prompt"]
    # The CLI's statistics go to stderr: drop them.
    {out, 0} = System.cmd("sh", ["-c", ~S(exec "$0" "$@" 2>/dev/null), TestModels.cli() | args])
    # The CLI ends its output with one newline of its own.
    String.replace_suffix(out, "\n", "")
  end

  test "greedy generate equals `ferrolm generate --temp 0` on both models; stream joined equals it", %{models: models} do
    for {name, model} <- models, prompt <- @prompts do
      {:ok, text} = Ferrolm.generate(model, prompt, max_tokens: 32, temp: 0.0)
      assert text == cli_greedy(name, prompt, 32), "#{name} / #{prompt}"
      assert text != ""
      assert Enum.join(Ferrolm.stream(model, prompt, max_tokens: 32, temp: 0.0)) == text
    end
  end

  test "greedy text is the same token for token: re-running the ids through a context", %{models: models} do
    model = models[TestModels.smol()]
    {:ok, ctx} = Context.create(model, n_ctx: 512)
    {:ok, ids} = Ferrolm.Tokenizer.encode(model, hd(@prompts))
    {:ok, text, out_ids, info} = Context.generate_full(ctx, [max_tokens: 16, temp: 0.0], ids)
    assert length(out_ids) == info.completion_tokens
    assert Ferrolm.Tokenizer.decode(model, out_ids) == {:ok, text}
    assert Context.n_tokens(ctx) >= length(ids) + length(out_ids) - 1
  end

  test "Enum.take(3) stops the generation and leaves the mailbox empty", %{models: models} do
    model = models[TestModels.smol()]
    {:ok, ctx} = Context.create(model, n_ctx: 1024)
    {:ok, ids} = Ferrolm.Tokenizer.encode(model, "Once upon a time")
    pieces = Ferrolm.stream(ctx, ids, max_tokens: 200, temp: 0.0) |> Enum.take(3)
    assert length(pieces) == 3
    # The context holds the prompt and a few tokens, far from the 200 asked for.
    n = Context.n_tokens(ctx)
    assert n <= length(ids) + 6, "the context holds #{n} tokens"
    Process.sleep(50)
    assert {:messages, []} = Process.info(self(), :messages)
    assert Context.n_tokens(ctx) == n
  end

  test "an exception while reading a stream cancels it; so does the caller exiting", %{models: models} do
    model = models[TestModels.smol()]
    {:ok, ctx} = Context.create(model, n_ctx: 1024)

    assert_raise RuntimeError, fn ->
      Ferrolm.stream(ctx, "Once upon a time", max_tokens: 200, temp: 0.0)
      |> Stream.with_index()
      |> Enum.each(fn {_, i} -> if i == 2, do: raise("stop") end)
    end

    assert Context.n_tokens(ctx) < 20
    assert {:messages, []} = Process.info(self(), :messages)

    {:ok, ctx2} = Context.create(model, n_ctx: 1024)
    parent = self()

    pid =
      spawn(fn ->
        Ferrolm.stream(ctx2, "Once upon a time", max_tokens: 200, temp: 0.0)
        |> Enum.each(fn _ -> send(parent, :piece) end)
      end)

    assert_receive :piece, 5_000
    Process.exit(pid, :kill)
    # The generation stops at its next token (its message cannot be delivered).
    n = Context.n_tokens(ctx2)
    assert n < 40, "the context holds #{n} tokens"
  end

  test "a context reuses its cached prefix", %{models: models} do
    model = models[TestModels.smol()]
    {:ok, ctx} = Context.create(model, n_ctx: 512)
    {:ok, a} = Context.generate(ctx, nil, "The capital of France is", max_tokens: 8, temp: 0.0)
    {:ok, b} = Ferrolm.generate(ctx, "The capital of France is", max_tokens: 8, temp: 0.0)
    assert a == b
    assert Context.n_ctx(ctx) == 512
    :ok = Context.clear(ctx)
    assert Context.n_tokens(ctx) == 0
  end

  test "no long schedule from loading, tokenizing, generating, streaming or embedding" do
    :erlang.system_monitor(self(), [{:long_schedule, 10}])

    try do
      {:ok, m} = Ferrolm.load_model(TestModels.path(TestModels.gemma()))
      _ = Ferrolm.Model.info(m)
      {:ok, _} = Ferrolm.Tokenizer.encode(m, String.duplicate("lorem ipsum ", 500))
      {:ok, _} = Ferrolm.generate(m, "The capital of France is", max_tokens: 16, temp: 0.0)
      _ = Ferrolm.stream(m, "Once upon a time", max_tokens: 16) |> Enum.to_list()
      {:ok, _} = Ferrolm.embed_batch(m, ["a", "b", "c"])
    after
      :erlang.system_monitor(:undefined)
    end

    long =
      Stream.repeatedly(fn ->
        receive do
          {:monitor, _, :long_schedule, info} -> info
        after
          0 -> nil
        end
      end)
      |> Enum.take_while(& &1)
      |> Enum.filter(fn info ->
        Enum.any?(info, fn
          {k, {mod, _, _}} when k in [:in, :out] -> String.starts_with?(Atom.to_string(mod), "Elixir.Ferrolm")
          _ -> false
        end)
      end)

    assert long == []
  end
end
