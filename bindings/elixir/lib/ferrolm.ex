defmodule Ferrolm do
  @moduledoc """
  ferrolm from the BEAM: load a model, generate, stream, chat, embed; `Ferrolm.Server` serves
  many callers with continuous batching.

  The API follows LlamaCppEx's (module layout, function names, options, return shapes): an
  application moves over by renaming `LlamaCppEx` to `Ferrolm`.

      {:ok, model} = Ferrolm.load_model("SmolLM2-135M-Instruct.Q4_1.gguf")
      {:ok, text} = Ferrolm.generate(model, "The capital of France is", max_tokens: 32, temp: 0.0)
      Ferrolm.stream(model, "Once upon a time", max_tokens: 64) |> Enum.each(&IO.write/1)

  Generation options: `max_tokens:` (default 256), `temp:` (≤ 0: greedy), `top_k:`, `top_p:`,
  `min_p:`, `typical_p:`, `seed:`, `penalty_repeat:`, `penalty_freq:`, `penalty_present:`,
  `penalty_last_n:`, `stop:` (strings), `ignore_eos:`, and one constraint: `grammar:` (GBNF or Lark,
  see `Ferrolm.Grammar`), `json_schema:` (a map or JSON string) or `regex:`. With a
  model (not a context), the context options of `Ferrolm.Context.create/2` apply too.
  """

  alias Ferrolm.{ChatCompletion, ChatCompletionChunk, Context, Model, Native, Options, StreamRunner, Thinking}

  @typedoc "A model, or a context to generate in (it keeps its cache between calls)."
  @type target :: Model.t() | Context.t()
  @typedoc "A chat message: a map with `role` and `content` (atom or string keys)."
  @type message :: map()

  @doc "Initialises the library (nothing to do: the NIF loads with the module). Returns `:ok`."
  @spec init() :: :ok
  def init, do: :ok

  @doc """
  Loads a GGUF file or a Hugging Face folder: `{:ok, model}` or `{:error, message}`.

  Options: `n_gpu_layers:` (0, the default: the CPU; any other value: OpenCL when a GPU is
  found, else the CPU), `backend:` (`:cpu`, `:opencl`, `:auto`, `:hybrid`; overrides
  `n_gpu_layers:`), `n_threads:` (size of the process-wide worker pool, first load only).
  """
  @spec load_model(Path.t(), keyword()) :: {:ok, Model.t()} | {:error, String.t()}
  def load_model(path, opts \\ [])

  def load_model(path, opts) when is_binary(path) do
    Options.check!(opts, [:n_gpu_layers, :backend, :n_threads, :use_mmap, :use_mlock], "Ferrolm.load_model/2")
    backend = backend(opts)
    n_threads = Keyword.get(opts, :n_threads)

    unless is_nil(n_threads) or (is_integer(n_threads) and n_threads > 0),
      do: raise(ArgumentError, "n_threads: expected a positive integer, got: #{inspect(n_threads)}")

    if File.exists?(path) do
      case Native.load_model(path, backend, n_threads) do
        {:ok, ref} -> {:ok, %Model{ref: ref, path: path}}
        {:error, msg} -> {:error, msg}
      end
    else
      {:error, "no such file or folder: #{path}"}
    end
  end

  def load_model(path, _opts), do: raise(ArgumentError, "a model path is a string, got: #{inspect(path)}")

  defp backend(opts) do
    case {Keyword.get(opts, :backend), Keyword.get(opts, :n_gpu_layers, 0)} do
      {nil, n} when is_integer(n) -> if n == 0, do: "cpu", else: "auto"
      {nil, n} -> raise ArgumentError, "n_gpu_layers: expected an integer, got: #{inspect(n)}"
      {b, _} when b in [:cpu, :opencl, :auto, :hybrid] -> Atom.to_string(b)
      {b, _} -> raise ArgumentError, "backend: expected :cpu, :opencl, :auto or :hybrid, got: #{inspect(b)}"
    end
  end

  @doc """
  Generates a continuation of `prompt` (text or token ids): `{:ok, text}`. On a model a fresh
  context is made for the call; on a context its cache is reused.
  """
  @spec generate(target(), Context.prompt(), keyword()) :: {:ok, String.t()} | {:error, String.t()}
  def generate(target, prompt, opts \\ []) do
    {ctx_opts, gen_opts} = split(target, opts)

    with {:ok, ctx} <- context(target, ctx_opts),
         {:ok, text, _ids, _info} <- Context.generate_full(ctx, defaults(gen_opts), prompt) do
      {:ok, text}
    end
  end

  @doc """
  Streams a continuation of `prompt` as a lazy `Stream` of text pieces. Halting it early
  (`Enum.take/2`, an exception, the caller exiting) cancels the generation at once, and no
  message of it is left in the caller's mailbox.
  """
  @spec stream(target(), Context.prompt(), keyword()) :: Enumerable.t()
  def stream(target, prompt, opts \\ []), do: StreamRunner.texts(events(target, prompt, opts))

  defp events(target, prompt, opts) do
    {ctx_opts, gen_opts} = split(target, opts)
    ctx = unwrap!(context(target, ctx_opts))
    Context.events(ctx, prompt, defaults(gen_opts))
  end

  @chat_keys [:chat_template, :chat_template_kwargs, :enable_thinking]

  @doc """
  Replies to `messages` (maps with `role` and `content`), rendered with the model's Jinja chat
  template (or `chat_template:`): `{:ok, text}`. `enable_thinking:` and `chat_template_kwargs:`
  go to the template; the generation options of `generate/3` apply.
  """
  @spec chat(target(), [message()], keyword()) :: {:ok, String.t()} | {:error, String.t()}
  def chat(target, messages, opts \\ []) do
    with {:ok, text, _info, _n} <- chat_run(target, messages, opts), do: {:ok, text}
  end

  @doc "Streams the reply to `messages` as text pieces (see `chat/3` and `stream/3`)."
  @spec stream_chat(target(), [message()], keyword()) :: Enumerable.t()
  def stream_chat(target, messages, opts \\ []), do: StreamRunner.texts(chat_events(target, messages, opts))

  @doc """
  Like `chat/3`, returning a `Ferrolm.ChatCompletion` in OpenAI's shape (the reasoning of a
  thinking model in `reasoning_content`).
  """
  @spec chat_completion(target(), [message()], keyword()) :: {:ok, ChatCompletion.t()} | {:error, String.t()}
  def chat_completion(target, messages, opts \\ []) do
    with {:ok, text, info, _} <- chat_run(target, messages, opts) do
      {:ok, ChatCompletion.new(model_name(target), text, info)}
    end
  end

  @doc "Like `stream_chat/3`, as a stream of `Ferrolm.ChatCompletionChunk`s in OpenAI's shape."
  @spec stream_chat_completion(target(), [message()], keyword()) :: Enumerable.t()
  def stream_chat_completion(target, messages, opts \\ []) do
    ChatCompletionChunk.stream(chat_events(target, messages, opts), model_name(target))
  end

  defp chat_run(target, messages, opts) do
    {chat_opts, rest} = Keyword.split(opts, @chat_keys)
    {ctx_opts, gen_opts} = split(target, rest)

    with {:ok, ctx} <- context(target, ctx_opts),
         {:ok, _prompt, tokens} <- chat_tokens(ctx.model, messages, chat_opts),
         {:ok, text, _ids, info} <- Context.generate_full(ctx, defaults(gen_opts), tokens) do
      {:ok, text, info, length(tokens)}
    end
  end

  defp chat_events(target, messages, opts) do
    {chat_opts, rest} = Keyword.split(opts, @chat_keys)
    {ctx_opts, gen_opts} = split(target, rest)
    ctx = unwrap!(context(target, ctx_opts))
    {:ok, _prompt, tokens} = chat_tokens(ctx.model, messages, chat_opts) |> raise_on_error()
    Context.events(ctx, tokens, defaults(gen_opts))
  end

  @doc false
  def chat_tokens(%Model{ref: ref}, messages, chat_opts) when is_list(messages) do
    kwargs = Keyword.get(chat_opts, :chat_template_kwargs, %{})
    unless is_map(kwargs), do: raise(ArgumentError, "chat_template_kwargs: expected a map, got: #{inspect(kwargs)}")

    kwargs =
      case Keyword.fetch(chat_opts, :enable_thinking) do
        {:ok, b} when is_boolean(b) -> Map.put(kwargs, "enable_thinking", b)
        {:ok, b} -> raise ArgumentError, "enable_thinking: expected a boolean, got: #{inspect(b)}"
        :error -> kwargs
      end

    case Native.chat_prompt_tokens(ref, messages, Keyword.get(chat_opts, :chat_template), kwargs) do
      {:error, msg} -> {:error, msg}
      {prompt, tokens} -> {:ok, prompt, tokens}
    end
  end

  def chat_tokens(_model, messages, _), do: raise(ArgumentError, "messages: expected a list of maps, got: #{inspect(messages)}")

  @doc """
  The embedding of `text`: `{:ok, [float]}`. Options: `normalize:` (default `true`, L2),
  `pooling_type:` (`:mean`, `:cls`, `:last`; default: the model's own, else mean).
  """
  @spec embed(Model.t(), String.t(), keyword()) :: {:ok, [float()]} | {:error, String.t()}
  def embed(model, text, opts \\ []) when is_binary(text) do
    with {:ok, [v]} <- embed_batch(model, [text], opts), do: {:ok, v}
  end

  @doc "Embeddings of `texts` (see `embed/3`): `{:ok, [[float]]}`."
  @spec embed_batch(Model.t(), [String.t()], keyword()) :: {:ok, [[float()]]} | {:error, String.t()}
  def embed_batch(%Model{ref: ref}, texts, opts \\ []) when is_list(texts) do
    Options.check!(opts, [:normalize, :pooling_type], "Ferrolm.embed_batch/3")
    unless Enum.all?(texts, &is_binary/1), do: raise(ArgumentError, "texts: expected a list of strings")
    normalize = Keyword.get(opts, :normalize, true)
    pooling = opts |> Keyword.get(:pooling_type) |> pooling_name()
    wrap(Native.embed(ref, texts, pooling, normalize))
  end

  @doc """
  How relevant each of `documents` is to `query`, with a reranker model (a GGUF with a
  classifier head and a rerank template, as llama.cpp's converter writes Qwen3-Reranker):
  `{:ok, [score]}` in the documents' order, higher is more relevant. A model that cannot rerank
  gives `{:error, message}`.
  """
  @spec rerank(Model.t(), String.t(), [String.t()]) :: {:ok, [float()]} | {:error, String.t()}
  def rerank(%Model{ref: ref}, query, documents) when is_binary(query) and is_list(documents) do
    unless Enum.all?(documents, &is_binary/1), do: raise(ArgumentError, "documents: expected a list of strings")
    wrap(Native.rerank(ref, query, documents))
  end

  @doc "Whether the model can rerank (see `rerank/3`)."
  @spec reranker?(Model.t()) :: boolean()
  def reranker?(%Model{ref: ref}), do: Native.is_reranker(ref)

  defp pooling_name(nil), do: nil
  defp pooling_name(p) when p in [:mean, :cls, :last], do: Atom.to_string(p)
  defp pooling_name(p) when p in ["mean", "cls", "last"], do: p
  defp pooling_name(p), do: raise(ArgumentError, "pooling_type: expected :mean, :cls or :last, got: #{inspect(p)}")

  # Splits options between the context (only when generating on a model) and the generation.
  defp split(%Model{}, opts), do: Keyword.split(opts, Options.context_keys())
  defp split(%Context{}, opts), do: {[], opts}
  defp split(other, _), do: raise(ArgumentError, "expected a Ferrolm.Model or Ferrolm.Context, got: #{inspect(other)}")

  defp context(%Context{} = ctx, _), do: {:ok, ctx}
  defp context(%Model{} = m, opts), do: Context.create(m, opts)

  defp defaults(opts), do: Keyword.put_new(opts, :max_tokens, 256)

  defp model_name(%Model{path: p}), do: Path.basename(p)
  defp model_name(%Context{model: m}), do: model_name(m)

  defp raise_on_error({:error, msg}), do: raise(ArgumentError, msg)
  defp raise_on_error(ok), do: ok

  @doc false
  def wrap({:error, _} = e), do: e
  def wrap(v), do: {:ok, v}

  @doc false
  def unwrap!({:ok, v}), do: v
  def unwrap!({:error, msg}), do: raise(ArgumentError, to_string(msg))
  def unwrap!(v), do: v

  # Used by Thinking-aware completions.
  @doc false
  def split_thinking(text), do: Thinking.parse(text)
end
