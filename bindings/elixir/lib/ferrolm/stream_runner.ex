defmodule Ferrolm.StreamRunner do
  @moduledoc false
  # Reads the `{:ferrolm_stream, id, payload}` messages of one generation as a lazy stream of
  # `{:token, text}` and `{:done, rest, info}`. Halting the stream early (Enum.take/2, an
  # exception) cancels the generation synchronously (no message of it is sent afterwards) and
  # flushes the ones already in the mailbox; a caller that exits makes the sender stop.

  @doc false
  # `start` returns `{:ok, cancel_fun, id}` or `{:error, reason}` (raised as ArgumentError).
  def events(start) do
    Stream.resource(
      fn ->
        case start.() do
          {:ok, cancel, id} -> {:running, cancel, id}
          {:error, :queue_full} -> raise Ferrolm.Error, "the server's queue is full"
          {:error, reason} -> raise ArgumentError, to_string(reason)
        end
      end,
      &next/1,
      fn {_, cancel, id} ->
        cancel.()
        flush(id)
      end
    )
  end

  defp next({:done, _, _} = acc), do: {:halt, acc}

  defp next({:running, cancel, id} = acc) do
    receive do
      {:ferrolm_stream, ^id, {:token, text}} -> {[{:token, text}], acc}
      {:ferrolm_stream, ^id, {:done, rest, info}} -> {[{:done, rest, info}], {:done, cancel, id}}
      {:ferrolm_stream, ^id, {:error, msg}} -> raise Ferrolm.Error, msg
    end
  end

  @doc false
  def flush(id) do
    receive do
      {:ferrolm_stream, ^id, _} -> flush(id)
    after
      0 -> :ok
    end
  end

  @doc false
  # The text pieces of an event stream.
  def texts(events) do
    Stream.flat_map(events, fn
      {:token, text} -> [text]
      {:done, "", _} -> []
      {:done, rest, _} -> [rest]
    end)
  end

  @doc false
  # Runs an event stream to the end: `{text, info}`.
  def collect(events) do
    Enum.reduce(events, {[], nil}, fn
      {:token, t}, {acc, info} -> {[acc | t], info}
      {:done, rest, info}, {acc, _} -> {[acc | rest], info}
    end)
    |> then(fn {iodata, info} -> {IO.iodata_to_binary(iodata), info} end)
  end

  @doc false
  def unique_id, do: System.unique_integer([:positive])
end
