defmodule Ferrolm.Options do
  @moduledoc false
  # Checks keyword options against a table of known names and types; bad input raises
  # ArgumentError with the option's name.

  @sampling [
    max_tokens: :non_neg_integer,
    temp: :number,
    top_k: :non_neg_integer,
    top_p: :number,
    min_p: :number,
    typical_p: :number,
    seed: :non_neg_integer,
    penalty_repeat: :number,
    penalty_freq: :number,
    penalty_present: :number,
    penalty_last_n: :integer,
    grammar: :binary,
    json_schema: :json,
    regex: :binary,
    stop: :binaries,
    ignore_eos: :boolean
  ]

  @kv [
    type_k: :kv_type,
    type_v: :kv_type,
    kv_policy: :kv_policy,
    kv_window: :pos_integer,
    kv_protected_prefix: :non_neg_integer,
    kv_budget: :pos_integer,
    kv_memory_threshold_mb: :pos_integer,
    kv_target_ratio: :number
  ]

  @context [n_ctx: :pos_integer, n_batch: :pos_integer, n_seq_max: :pos_integer] ++ @kv

  @doc false
  def sampling_keys, do: Keyword.keys(@sampling)
  @doc false
  def context_keys, do: Keyword.keys(@context)
  @doc false
  def kv_keys, do: Keyword.keys(@kv)

  @doc false
  def sampling(opts), do: take(opts, @sampling)
  @doc false
  def context(opts), do: take(opts, @context)

  @doc false
  def check!(opts, allowed, where) when is_list(opts) do
    unless Keyword.keyword?(opts), do: raise(ArgumentError, "#{where}: options must be a keyword list, got: #{inspect(opts)}")

    case Keyword.keys(opts) -- allowed do
      [] -> :ok
      unknown -> raise ArgumentError, "#{where}: unknown option(s) #{inspect(unknown)}; known: #{inspect(allowed)}"
    end

    opts
  end

  def check!(opts, _allowed, where), do: raise(ArgumentError, "#{where}: options must be a keyword list, got: #{inspect(opts)}")

  @doc false
  def take(opts, table) do
    map =
      for {key, type} <- table, Keyword.has_key?(opts, key), into: %{} do
        {key, cast!(key, type, Keyword.fetch!(opts, key))}
      end

    if Map.get(map, :grammar) && Map.get(map, :json_schema) do
      raise ArgumentError, "give either grammar: or json_schema:, not both"
    end

    map
  end

  defp cast!(_key, _type, nil), do: nil
  defp cast!(_key, :number, v) when is_number(v), do: v * 1.0
  defp cast!(_key, :integer, v) when is_integer(v), do: v
  defp cast!(_key, :non_neg_integer, v) when is_integer(v) and v >= 0, do: v
  defp cast!(_key, :pos_integer, v) when is_integer(v) and v > 0, do: v
  defp cast!(_key, :binary, v) when is_binary(v), do: v
  defp cast!(_key, :boolean, v) when is_boolean(v), do: v
  defp cast!(_key, :json, v) when is_map(v) or is_binary(v), do: v
  defp cast!(key, :binaries, v) when is_list(v), do: Enum.map(v, &cast!(key, :binary, &1))
  defp cast!(key, :binaries, v) when is_binary(v), do: cast!(key, :binaries, [v])

  defp cast!(key, :kv_type, v) when is_atom(v) or is_binary(v) do
    # The library checks the name (f32, f16, q8_0, …) and says which ones it knows.
    _ = key
    to_string(v)
  end

  defp cast!(key, :kv_policy, v) when is_atom(v) or is_binary(v) do
    name = to_string(v)
    if name in ~w(none sliding streaming h2o snapkv), do: name, else: bad(key, v, "one of :none, :sliding, :h2o, :snapkv")
  end

  defp cast!(key, type, v), do: bad(key, v, type)

  defp bad(key, v, type), do: raise(ArgumentError, "option #{key}: expected #{describe(type)}, got: #{inspect(v)}")

  defp describe(:number), do: "a number"
  defp describe(:non_neg_integer), do: "a non-negative integer"
  defp describe(:pos_integer), do: "a positive integer"
  defp describe(:binaries), do: "a string or a list of strings"
  defp describe(:json), do: "a map or a JSON string"
  defp describe(t) when is_atom(t), do: "a #{t}"
  defp describe(t), do: t
end
