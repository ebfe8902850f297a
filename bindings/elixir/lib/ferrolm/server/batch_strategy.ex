defmodule Ferrolm.Server.BatchStrategy do
  @moduledoc """
  A batch strategy written in Elixir, for `Ferrolm.Server.start_link(batch_strategy: MyStrategy)`.

  Each tick the engine calls `build_batch(slots, budget, chunk_size, opts)` with what every busy
  slot wants:

      %{slot: 0, decode: true, prompt_left: 0, max_chunk: 512, order: 17}

  (`decode`: the slot is generating and has a token to run; `prompt_left`: prompt tokens it may
  run this tick; `order`: arrival order) and at most `budget` tokens to fill. It returns
  `{decode_slots, prefill_chunks}`: the generating slots whose next token runs, and
  `{slot, n_tokens}` prompt chunks. A plan that cannot run (a slot twice, too many tokens,
  nothing while work waits), an exception, or no answer within `strategy_timeout_ms:` (default
  100) makes the engine use the built-in `decode-first` strategy for that tick.

  The built-in strategies are `:decode_first`, `:prefill_first` and `:balanced`.
  """

  @typedoc "What one busy slot wants from a tick."
  @type slot :: %{
          slot: non_neg_integer(),
          decode: boolean(),
          prompt_left: non_neg_integer(),
          max_chunk: pos_integer(),
          order: non_neg_integer()
        }

  @doc "The tick's plan."
  @callback build_batch([slot()], budget :: pos_integer(), chunk_size :: pos_integer(), opts :: keyword()) ::
              {[non_neg_integer()], [{non_neg_integer(), pos_integer()}]}

  @doc false
  # The process that answers the engine's questions for a strategy module.
  def run(module, chunk_size, opts) do
    receive do
      {:reply_to, reply} -> loop(module, chunk_size, opts, reply)
    end
  end

  defp loop(module, chunk_size, opts, reply) do
    receive do
      {:ferrolm_plan, seq, slots, budget} ->
        {decode, prefill} =
          try do
            module.build_batch(slots, budget, chunk_size, opts)
          rescue
            e ->
              require Logger
              Logger.error("#{inspect(module)}.build_batch/4 raised: " <> Exception.message(e))
              {[], []}
          end

        Ferrolm.Native.strategy_reply(reply, seq, decode, prefill)
        loop(module, chunk_size, opts, reply)
    end
  end
end
