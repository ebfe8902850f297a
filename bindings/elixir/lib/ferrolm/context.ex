defmodule Ferrolm.Context do
  @moduledoc """
  A context: one sequence's KV cache over a model. Each generation gets the whole prompt; the
  context reuses the longest prefix it already holds (a multi-turn chat prefills only the new
  turn).

  Options of `create/2`: `n_ctx:` (default 4096), `n_batch:`, `n_seq_max:` (1: one sequence per
  context; use `Ferrolm.Server` for many), the KV cache types `type_k:`/`type_v:` (`:f16`,
  `:q8_0`, …) and the eviction policy `kv_policy:` (`:none`, `:sliding`, `:h2o`, `:snapkv`) with
  `kv_window:`, `kv_protected_prefix:`, `kv_budget:` (tokens kept), `kv_memory_threshold_mb:` and
  `kv_target_ratio:` (evict when the process's memory passes the threshold).

  A context keeps its model alive; both are freed by the garbage collector.
  """

  alias Ferrolm.{Model, Native, Options, Sampler, StreamRunner}

  @enforce_keys [:ref, :model]
  defstruct [:ref, :model]

  @typedoc "A context."
  @type t :: %__MODULE__{ref: reference(), model: Model.t()}
  @typedoc "A prompt: text, or token ids."
  @type prompt :: String.t() | [non_neg_integer()]

  @doc "Creates a context on `model`."
  @spec create(Model.t(), keyword()) :: {:ok, t()} | {:error, String.t()}
  def create(%Model{ref: ref} = model, opts \\ []) do
    Options.check!(opts, Options.context_keys(), "Ferrolm.Context.create/2")
    opts_map = Options.context(opts)

    if Map.get(opts_map, :n_seq_max, 1) != 1 do
      raise ArgumentError, "n_seq_max: a context holds one sequence; use Ferrolm.Server for parallel sequences"
    end

    case Native.context_create(ref, opts_map) do
      {:ok, ctx} -> {:ok, %__MODULE__{ref: ctx, model: model}}
      {:error, msg} -> {:error, msg}
    end
  end

  @doc """
  Generates from `prompt` with `sampler` (or `nil`) and the sampling options of
  `Ferrolm.generate/3` (which override the sampler's): `{:ok, text}`.
  """
  @spec generate(t(), Sampler.t() | nil, prompt(), keyword()) :: {:ok, String.t()} | {:error, String.t()}
  def generate(%__MODULE__{} = ctx, sampler, prompt, opts \\ []) do
    with {:ok, text, _ids, _info} <- generate_full(ctx, merge(sampler, opts), prompt), do: {:ok, text}
  end

  @doc false
  def generate_full(%__MODULE__{ref: ref, model: model}, opts, prompt) do
    Options.check!(opts, Options.sampling_keys(), "generate")
    params = Options.sampling(opts)

    with {:ok, tokens} <- tokens(model, prompt) do
      Native.context_generate(ref, tokens, params)
    end
  end

  @doc """
  Streams a generation from `prompt` as a lazy `Stream` of text pieces (see `Ferrolm.stream/3`).
  """
  @spec stream(t(), prompt(), keyword()) :: Enumerable.t()
  def stream(ctx, prompt, opts \\ []), do: StreamRunner.texts(events(ctx, prompt, opts))

  @doc false
  def events(%__MODULE__{ref: ref, model: model}, prompt, opts) do
    Options.check!(opts, Options.sampling_keys(), "stream")
    params = Options.sampling(opts)

    StreamRunner.events(fn ->
      with {:ok, tokens} <- tokens(model, prompt) do
        id = StreamRunner.unique_id()

        case Native.context_stream(ref, tokens, params, self(), id) do
          {:error, msg} -> {:error, msg}
          stream -> {:ok, fn -> Native.stream_cancel(stream) end, id}
        end
      end
    end)
  end

  @doc "Forgets every cached token."
  @spec clear(t()) :: :ok
  def clear(%__MODULE__{ref: ref}), do: Native.context_clear(ref)

  @doc "The context size in tokens."
  @spec n_ctx(t()) :: pos_integer()
  def n_ctx(ctx), do: info(ctx).n_ctx

  @doc "Tokens the context holds (prompt and generated), after any running stream has stopped."
  @spec n_tokens(t()) :: non_neg_integer()
  def n_tokens(ctx), do: info(ctx).n_tokens

  @doc "`%{n_ctx, n_tokens, kv_len, kv_bytes, tokens}`."
  @spec info(t()) :: map()
  def info(%__MODULE__{ref: ref}), do: Native.context_info(ref)

  @doc false
  def tokens(%Model{}, ids) when is_list(ids), do: {:ok, ids}
  def tokens(%Model{} = m, text) when is_binary(text), do: Ferrolm.Tokenizer.encode(m, text)
  def tokens(_m, other), do: raise(ArgumentError, "a prompt is a string or a list of token ids, got: #{inspect(other)}")

  defp merge(nil, opts), do: opts
  defp merge(%Sampler{opts: s}, opts), do: Keyword.merge(s, opts)
end
