unless Code.ensure_loaded?(:telemetry) do
  defmodule :telemetry do
    @moduledoc false
    # A stand-in for the :telemetry package (Hex is not reachable here): forwards events to the
    # test processes registered in :persistent_term, so the package's calls can be checked.
    def execute(event, measurements, metadata) do
      for pid <- :persistent_term.get(:ferrolm_test_sinks, []), do: send(pid, {:telemetry, event, measurements, metadata})
      :ok
    end
  end
end

defmodule Ferrolm.ServerTest.OnePromptAtATime do
  @moduledoc false
  # Every generating slot's token, and four tokens of the oldest waiting prompt.
  @behaviour Ferrolm.Server.BatchStrategy

  @impl true
  def build_batch(slots, budget, _chunk_size, opts) do
    :counters.add(opts[:calls], 1, 1)
    decode = for %{decode: true, slot: s} <- slots, do: s

    prefill =
      slots
      |> Enum.filter(&(not &1.decode and &1.prompt_left > 0))
      |> Enum.sort_by(& &1.order)
      |> Enum.take(1)
      |> Enum.map(&{&1.slot, min(&1.prompt_left, 4)})

    {Enum.take(decode, budget - 4), prefill}
  end
end

defmodule Ferrolm.ServerTest do
  use ExUnit.Case, async: false
  @moduletag :model

  alias Ferrolm.{Server, TestModels}

  @prompts for i <- 1..8, do: "Question #{i}: what is #{i} times #{i + 1}? Answer:"

  setup_all do
    {:ok, model} = Ferrolm.load_model(TestModels.path(TestModels.smol()))
    alone = Enum.map(@prompts, fn p -> Ferrolm.generate(model, p, max_tokens: 24, temp: 0.0) end)
    {:ok, model: model, alone: alone}
  end

  defp concurrently(server) do
    @prompts
    |> Enum.map(fn p -> Task.async(fn -> Server.generate(server, p, max_tokens: 24, temp: 0.0) end) end)
    |> Task.await_many(60_000)
  end

  defp ferrolm_long_schedules do
    receive do
      {:monitor, _pid, :long_schedule, info} -> [info | ferrolm_long_schedules()]
    after
      0 -> []
    end
    |> Enum.filter(fn info -> Enum.any?(info, &ferrolm_location?/1) end)
  end

  defp ferrolm_location?({k, {mod, _, _}}) when k in [:in, :out], do: String.starts_with?(Atom.to_string(mod), "Elixir.Ferrolm")
  defp ferrolm_location?(_), do: false

  test "8 concurrent callers get the greedy text each gets alone, without long schedules", %{model: model, alone: alone} do
    {:ok, server} = Server.start_link(model: model, n_parallel: 8, n_ctx: 512)
    :erlang.system_monitor(self(), [{:long_schedule, 10}])

    try do
      assert concurrently(server) == alone
      # A stream beside them, read to the end.
      assert {:ok, Enum.join(Server.stream(server, hd(@prompts), max_tokens: 24, temp: 0.0))} == hd(alone)
    after
      :erlang.system_monitor(:undefined)
    end

    assert ferrolm_long_schedules() == []
    # The counters are published after each tick.
    wait_until(fn -> Server.get_stats(server).requests_finished >= 9 end)
    stats = Server.get_stats(server)
    assert %{n_parallel: 8, queue_depth: 0, active_slots: 0, idle_slots: 8} = stats
    # They ran together: fewer forward passes than tokens.
    assert stats.forward_passes_total < stats.generated_tokens_total
  end

  test "a custom strategy module plans the ticks; output stays the same", %{model: model, alone: alone} do
    calls = :counters.new(1, [])

    {:ok, server} =
      Server.start_link(
        model: model,
        n_parallel: 4,
        n_ctx: 512,
        batch_strategy: Ferrolm.ServerTest.OnePromptAtATime,
        strategy_opts: [calls: calls]
      )

    assert concurrently(server) == alone
    stats = Server.get_stats(server)
    # Prompts went four tokens a tick, one at a time: at least one call per four prompt tokens.
    assert :counters.get(calls, 1) >= div(stats.prompt_tokens_total, 4)
    assert :counters.get(calls, 1) >= stats.forward_passes_total
  end

  test "a caller killed mid-stream frees its slot within a tick", %{model: model} do
    {:ok, server} = Server.start_link(model: model, n_parallel: 2, n_ctx: 1024, temp: 0.0)
    parent = self()

    caller =
      spawn(fn ->
        Server.stream(server, "Once upon a time", max_tokens: 500) |> Enum.each(fn _ -> send(parent, :piece) end)
      end)

    assert_receive :piece, 10_000
    # The counters are published after the tick that sent the piece.
    wait_until(fn -> Server.get_stats(server).active_slots == 1 end)
    passes = Server.get_stats(server).forward_passes_total
    Process.exit(caller, :kill)
    wait_until(fn -> Server.get_stats(server).active_slots == 0 end)
    after_ = Server.get_stats(server)
    assert after_.forward_passes_total - passes <= 2, "#{after_.forward_passes_total - passes} ticks ran"
    assert after_.requests_cancelled == 1
  end

  test "a full queue answers {:error, :queue_full}; telemetry per request and per tick", %{model: model} do
    :persistent_term.put(:ferrolm_test_sinks, [self()])
    {:ok, server} = Server.start_link(model: model, n_parallel: 1, max_queue: 1, n_ctx: 1024, temp: 0.0)

    try do
      running = Server.stream(server, "Once upon a time", max_tokens: 400)
      task = Task.async(fn -> Enum.take(running, 200) end)
      wait_until(fn -> Server.get_stats(server).active_slots == 1 end)
      queued = Task.async(fn -> Server.generate(server, "Hello", max_tokens: 4) end)
      wait_until(fn -> Server.get_stats(server).queue_depth == 1 end)
      assert Server.generate(server, "Hi", max_tokens: 4) == {:error, :queue_full}
      assert length(Task.await(task, 60_000)) == 200
      assert {:ok, _} = Task.await(queued, 60_000)
    after
      :persistent_term.erase(:ferrolm_test_sinks)
    end

    assert_received {:telemetry, [:ferrolm, :server, :tick], %{batch_tokens: b, duration_us: d, tokens_per_second: _}, %{server: ^server}}
                    when b > 0 and d > 0

    assert_received {:telemetry, [:ferrolm, :server, :request, :done],
                     %{completion_tokens: 4, ttft_ms: ttft, tokens_per_second: _, prompt_tokens: p}, %{finish_reason: "length"}}
                    when ttft >= 0 and p > 0
  end

  test "bad options raise ArgumentError; a bad model path is an error", %{model: model} do
    assert_raise ArgumentError, ~r/unknown option/, fn -> Server.start_link(model: model, n_paralel: 2) end
    assert_raise ArgumentError, ~r/not both/, fn -> Ferrolm.generate(model, "x", grammar: "start: \"a\"", json_schema: %{}) end
    Process.flag(:trap_exit, true)
    assert {:error, "no such file" <> _} = Server.start_link(model_path: "/nonexistent.gguf")
  end

  defp wait_until(fun, tries \\ 500) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("condition not reached")
      true -> Process.sleep(10) && wait_until(fun, tries - 1)
    end
  end
end
