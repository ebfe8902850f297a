defmodule Ferrolm.MemoryTest do
  use ExUnit.Case, async: false
  @moduletag :model

  alias Ferrolm.TestModels

  defp rss_kb do
    "/proc/#{System.pid()}/status"
    |> File.read!()
    |> then(&Regex.run(~r/VmRSS:\s+(\d+) kB/, &1))
    |> then(fn [_, kb] -> String.to_integer(kb) end)
  end

  # Loads a model, uses it through a context, and drops every reference in a process that exits.
  defp load_use_drop(path) do
    fn ->
      {:ok, m} = Ferrolm.load_model(path)
      {:ok, _} = Ferrolm.generate(m, "Hello", max_tokens: 4, temp: 0.0)
      :ok
    end
    |> Task.async()
    |> Task.await(60_000)

    :erlang.garbage_collect()
  end

  @tag timeout: 300_000
  test "loading and dropping a model 20 times returns the RSS to within 10% of its start" do
    path = TestModels.path(TestModels.gemma())
    # Warm up (the worker pool, the allocator's arenas), then measure. glibc gives each thread
    # that allocates its own arena and keeps a little of it after freeing; loads run on
    # whichever dirty scheduler is free, so warm up on all of them at once (one load each).
    n = :erlang.system_info(:dirty_io_schedulers) + :erlang.system_info(:dirty_cpu_schedulers)

    1..n
    |> Task.async_stream(fn _ -> load_use_drop(path) end, max_concurrency: n, timeout: 120_000)
    |> Stream.run()

    load_use_drop(path)
    start = rss_kb()
    for _ <- 1..20, do: load_use_drop(path)
    Process.sleep(100)
    final = rss_kb()
    assert final <= start * 1.10, "RSS went from #{start} kB to #{final} kB"
  end

  test "a context keeps its model alive after the model's last reference is gone" do
    {:ok, ctx} =
      Task.async(fn ->
        {:ok, m} = Ferrolm.load_model(TestModels.path(TestModels.smol()))
        Ferrolm.Context.create(m, n_ctx: 256)
      end)
      |> Task.await()

    :erlang.garbage_collect()
    assert {:ok, text} = Ferrolm.generate(ctx, "The capital of France is", max_tokens: 4, temp: 0.0)
    assert is_binary(text)
  end
end
