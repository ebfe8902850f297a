defmodule Ferrolm.Server do
  @moduledoc """
  Many callers on one model: a GenServer over ferrolm's engine, with continuous batching
  (`n_parallel:` slots generating together, one forward pass per tick), chunked prefill, a prefix
  cache shared by all slots, a bounded queue and batch-invariant greedy output (a request's
  greedy text does not depend on what else runs with it).

      {:ok, server} = Ferrolm.Server.start_link(model_path: "model.gguf", n_parallel: 8)
      {:ok, text} = Ferrolm.Server.generate(server, "The capital of France is", max_tokens: 32)
      Ferrolm.Server.stream(server, "Once upon a time") |> Enum.each(&IO.write/1)

  Options of `start_link/1`: `model_path:` (or `model:`, a loaded `Ferrolm.Model`),
  `n_parallel:` (slots, default 4), `n_ctx:` (per slot, default 4096), `chunk_size:` (most
  tokens a tick, default 512), `cache_prompt:` (the shared prefix cache, default `true`),
  `prefix_cache_bytes:`, `max_queue:` (default 64; more requests get `{:error, :queue_full}`),
  `batch_strategy:` (`:decode_first`, `:prefill_first`, `:balanced`, or a module implementing
  `Ferrolm.Server.BatchStrategy`), `strategy_opts:`, `strategy_timeout_ms:`, the KV options of
  `Ferrolm.Context.create/2`, the sampling defaults of `Ferrolm.generate/3` (`temp:`, `top_k:`…,
  which a request's options override), the `Ferrolm.load_model/2` options, and `name:`.

  Tokens go from the engine thread straight to the caller's mailbox; a caller that exits (or
  halts its stream) frees its slot on the next tick. See `Ferrolm.Telemetry` for the events.
  """

  use GenServer

  alias Ferrolm.{Context, Model, Native, Options, StreamRunner}

  @server_keys [
    :model_path,
    :model,
    :n_parallel,
    :chunk_size,
    :cache_prompt,
    :prefix_cache_bytes,
    :max_queue,
    :batch_strategy,
    :strategy_opts,
    :strategy_timeout_ms,
    :name,
    :n_gpu_layers,
    :backend,
    :n_threads
  ]

  @doc "Starts a server (see the module doc for the options)."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    Options.check!(opts, @server_keys ++ Options.context_keys() ++ Options.sampling_keys(), "Ferrolm.Server.start_link/1")
    {name, opts} = Keyword.pop(opts, :name)
    GenServer.start_link(__MODULE__, opts, if(name, do: [name: name], else: []))
  end

  @doc "Generates for `prompt` (text or token ids): `{:ok, text}`, `{:error, :queue_full}` or `{:error, message}`."
  @spec generate(GenServer.server(), Context.prompt(), keyword()) :: {:ok, String.t()} | {:error, term()}
  def generate(server, prompt, opts \\ []) do
    case submit(server, prompt, opts) do
      {:ok, start} ->
        {text, _info} = StreamRunner.collect(events(server, fn -> start end))
        {:ok, text}

      error ->
        error
    end
  rescue
    e in Ferrolm.Error -> {:error, e.message}
  end

  @doc """
  Streams the text for `prompt` (a lazy `Stream`; the request is queued when the stream is
  first read). Halting it early cancels the request. A full queue raises `Ferrolm.Error`.
  """
  @spec stream(GenServer.server(), Context.prompt(), keyword()) :: Enumerable.t()
  def stream(server, prompt, opts \\ []) do
    StreamRunner.texts(events(server, fn -> submit(server, prompt, opts) |> started() end))
  end

  defp started({:ok, start}), do: start
  defp started(error), do: error

  defp events(server, start) do
    t0 = System.monotonic_time()

    start
    |> StreamRunner.events()
    |> Stream.each(fn
      {:done, _, info} -> request_done(server, info, t0)
      _ -> :ok
    end)
  end

  @doc """
  `%{n_parallel, active_slots, idle_slots, queue_depth, requests_total, generated_tokens_total,
  generation_tokens_per_second, prefix_cache_hits, slots: [...], ...}`.
  """
  @spec get_stats(GenServer.server()) :: map()
  def get_stats(server), do: GenServer.call(server, :stats)

  @doc "Stops the server; running requests end with an error."
  @spec stop(GenServer.server()) :: :ok
  def stop(server), do: GenServer.stop(server)

  # Tokenizes in the caller, then queues the request in the server (which monitors the caller).
  defp submit(server, prompt, opts) do
    {model, defaults} = GenServer.call(server, :model)
    Options.check!(opts, Options.sampling_keys(), "Ferrolm.Server request")
    params = Options.sampling(Keyword.merge(defaults, opts) |> Keyword.put_new(:max_tokens, 256))

    with {:ok, tokens} <- Context.tokens(model, prompt) do
      id = StreamRunner.unique_id()

      case GenServer.call(server, {:submit, tokens, params, self(), id}) do
        {:ok, req} ->
          cancel = fn ->
            Native.request_cancel(req)
            GenServer.cast(server, {:finished, id})
          end

          {:ok, {:ok, cancel, id}}

        error ->
          error
      end
    end
  end

  defp request_done(server, info, t0) do
    ms = System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond) / 1000
    rate = if info.decode_ms > 0, do: info.completion_tokens * 1000 / info.decode_ms, else: 0.0

    Ferrolm.Telemetry.execute(
      [:ferrolm, :server, :request, :done],
      Map.take(info, [:prompt_tokens, :cached_tokens, :completion_tokens, :queue_ms, :prompt_ms, :decode_ms])
      |> Map.merge(%{ttft_ms: info.queue_ms + info.prompt_ms, duration_ms: ms, tokens_per_second: rate}),
      %{server: server, finish_reason: info.finish_reason}
    )
  end

  # --- GenServer ---

  @impl true
  def init(opts) do
    with {:ok, model} <- model(opts),
         {:ok, strategy_pid, chunk} <- strategy(opts),
         config = config(opts, chunk),
         {:ok, engine, reply} <- Native.server_start(model.ref, config, strategy_pid, self()) do
      if strategy_pid, do: send(strategy_pid, {:reply_to, reply})
      defaults = Keyword.take(opts, Options.sampling_keys())
      {:ok, %{engine: engine, model: model, defaults: defaults, requests: %{}, strategy: strategy_pid}}
    else
      {:error, msg} -> {:stop, msg}
    end
  end

  defp model(opts) do
    case {Keyword.get(opts, :model), Keyword.get(opts, :model_path)} do
      {%Model{} = m, _} -> {:ok, m}
      {nil, path} when is_binary(path) -> Ferrolm.load_model(path, Keyword.take(opts, [:n_gpu_layers, :backend, :n_threads]))
      _ -> raise ArgumentError, "Ferrolm.Server needs model_path: (a string) or model: (a Ferrolm.Model)"
    end
  end

  defp strategy(opts) do
    chunk = Keyword.get(opts, :chunk_size, 512)

    case Keyword.get(opts, :batch_strategy, :decode_first) do
      s when s in [:decode_first, :prefill_first, :balanced] ->
        {:ok, nil, chunk}

      mod when is_atom(mod) ->
        Code.ensure_loaded(mod)

        unless function_exported?(mod, :build_batch, 4),
          do: raise(ArgumentError, "batch_strategy: #{inspect(mod)} does not implement build_batch/4")

        pid = spawn_link(Ferrolm.Server.BatchStrategy, :run, [mod, chunk, Keyword.get(opts, :strategy_opts, [])])
        {:ok, pid, chunk}

      other ->
        raise ArgumentError, "batch_strategy: expected :decode_first, :prefill_first, :balanced or a module, got: #{inspect(other)}"
    end
  end

  defp config(opts, chunk) do
    strategy =
      case Keyword.get(opts, :batch_strategy, :decode_first) do
        s when s in [:decode_first, :prefill_first, :balanced] -> s |> Atom.to_string() |> String.replace("_", "-")
        _ -> "decode-first"
      end

    ints = [:n_parallel, :n_ctx, :max_queue, :prefix_cache_bytes, :strategy_timeout_ms]

    for k <- ints, v = Keyword.get(opts, k), into: %{} do
      unless is_integer(v) and v > 0, do: raise(ArgumentError, "#{k}: expected a positive integer, got: #{inspect(v)}")
      {k, v}
    end
    |> Map.merge(Map.drop(Options.context(opts), [:n_ctx, :n_batch, :n_seq_max]))
    |> Map.merge(%{chunk_size: chunk, batch_strategy: strategy, cache_prompt: Keyword.get(opts, :cache_prompt, true)})
  end

  @impl true
  def handle_call(:model, _from, st), do: {:reply, {st.model, st.defaults}, st}
  def handle_call(:stats, _from, st), do: {:reply, Native.server_stats(st.engine), st}

  def handle_call({:submit, tokens, params, pid, id}, _from, st) do
    case Native.server_submit(st.engine, tokens, params, pid, id) do
      {:ok, req} ->
        mon = Process.monitor(pid)
        {:reply, {:ok, req}, %{st | requests: Map.put(st.requests, id, {mon, req})}}

      error ->
        {:reply, error, st}
    end
  end

  @impl true
  def handle_cast({:finished, id}, st) do
    case Map.pop(st.requests, id) do
      {{mon, _req}, rest} ->
        Process.demonitor(mon, [:flush])
        {:noreply, %{st | requests: rest}}

      {nil, _} ->
        {:noreply, st}
    end
  end

  @impl true
  def handle_info({:ferrolm_tick, m}, st) do
    rate = if m.duration_us > 0, do: m.batch_tokens * 1.0e6 / m.duration_us, else: 0.0
    Ferrolm.Telemetry.execute([:ferrolm, :server, :tick], Map.put(m, :tokens_per_second, rate), %{server: self()})
    {:noreply, st}
  end

  def handle_info({:DOWN, mon, :process, _pid, _reason}, st) do
    {gone, keep} = Enum.split_with(st.requests, fn {_id, {m, _}} -> m == mon end)
    Enum.each(gone, fn {_id, {_, req}} -> Native.request_cancel(req) end)
    {:noreply, %{st | requests: Map.new(keep)}}
  end

  def handle_info(_other, st), do: {:noreply, st}
end
