# Aggregate generation speed of N concurrent callers through Ferrolm.Server against the same
# number of concurrent HTTP clients of `ferrolm serve`, with the same slots, threads, context,
# prompts and token counts, alternating in one run (greedy, ignore_eos: every request generates
# exactly max_tokens tokens).
#
#   cd bindings/elixir
#   elixir --erl "+sbwt none +sbwtdcpu none +sbwtdio none" -S mix run bench/server_vs_serve.exs \
#     MODEL.gguf [callers=8] [max_tokens=128] [threads=2] [rounds=3]
#
# (Without those flags the BEAM's schedulers spin while idle, which slows the engine when the
# machine has no spare core; see the README.)
#
# The CLI is $FERROLM_BIN, else <workspace>/target/release/ferrolm.
[path | rest] = System.argv()
[callers, max_tokens, threads, rounds] =
  Enum.zip([8, 128, 2, 3], rest ++ List.duplicate(nil, 4))
  |> Enum.map(fn {d, a} -> if a, do: String.to_integer(a), else: d end)

n_ctx = 1024
bin = System.get_env("FERROLM_BIN") || Path.expand("../../../target/release/ferrolm", __DIR__)
prompts = for i <- 1..callers, do: "Request #{i}: write a long story about a dragon number #{i}."

timed = fn fun ->
  t0 = System.monotonic_time(:microsecond)
  tokens = fun.()
  {tokens, (System.monotonic_time(:microsecond) - t0) / 1.0e6}
end

# --- Ferrolm.Server ---
{:ok, model} = Ferrolm.load_model(path, n_threads: threads)
{:ok, server} = Ferrolm.Server.start_link(model: model, n_parallel: callers, n_ctx: n_ctx, temp: 0.0)

ferrolm_round = fn ->
  timed.(fn ->
    prompts
    |> Enum.map(fn p -> Task.async(fn -> Ferrolm.Server.generate(server, p, max_tokens: max_tokens, ignore_eos: true) end) end)
    |> Task.await_many(600_000)
    |> Enum.map(fn {:ok, _} -> max_tokens end)
    |> Enum.sum()
  end)
end

# --- ferrolm serve ---
port =
  Port.open({:spawn_executable, bin}, [
    :binary,
    :exit_status,
    :stderr_to_stdout,
    args: ["serve", "-m", path, "--port", "0", "--parallel", "#{callers}", "-t", "#{threads}", "-c", "#{n_ctx}"]
  ])

addr =
  Stream.repeatedly(fn ->
    receive do
      {^port, {:data, d}} -> d
    after
      60_000 -> raise "ferrolm serve did not start"
    end
  end)
  |> Enum.reduce_while("", fn d, acc ->
    acc = acc <> d
    case Regex.run(~r{listening on (http://\S+)}, acc) do
      [_, a] -> {:halt, a}
      nil -> {:cont, acc}
    end
  end)

:inets.start()
url = String.to_charlist(addr <> "/v1/completions")

serve_round = fn ->
  timed.(fn ->
    prompts
    |> Enum.map(fn p ->
      Task.async(fn ->
        body = ~s({"prompt": "#{p}", "max_tokens": #{max_tokens}, "temperature": 0, "ignore_eos": true})
        {:ok, {{_, 200, _}, _, resp}} = :httpc.request(:post, {url, [], ~c"application/json", body}, [timeout: 600_000], [])
        [_, n] = Regex.run(~r/"completion_tokens":\s*(\d+)/, to_string(resp))
        String.to_integer(n)
      end)
    end)
    |> Task.await_many(600_000)
    |> Enum.sum()
  end)
end

# Warm-up of both, then alternating rounds.
ferrolm_round.()
serve_round.()

results =
  for r <- 1..rounds do
    {nf, tf} = ferrolm_round.()
    {ns, ts} = serve_round.()
    IO.puts("round #{r}: Ferrolm.Server #{Float.round(nf / tf, 1)} tok/s (#{nf} tokens, #{Float.round(tf, 2)} s); " <>
              "ferrolm serve #{Float.round(ns / ts, 1)} tok/s (#{ns} tokens, #{Float.round(ts, 2)} s)")
    {nf / tf, ns / ts}
  end

median = fn xs -> xs |> Enum.sort() |> Enum.at(div(length(xs), 2)) end
f = median.(Enum.map(results, &elem(&1, 0)))
s = median.(Enum.map(results, &elem(&1, 1)))
IO.puts("median: Ferrolm.Server #{Float.round(f, 1)} tok/s, ferrolm serve #{Float.round(s, 1)} tok/s, ratio #{Float.round(100 * f / s, 1)}%")
{:os_pid, os_pid} = Port.info(port, :os_pid)
System.cmd("kill", ["#{os_pid}"])
