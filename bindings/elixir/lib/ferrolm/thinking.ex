defmodule Ferrolm.Thinking do
  @moduledoc """
  Splits a thinking model's reasoning (`<think>…</think>`) from its answer, on a whole text
  (`parse/1`) or incrementally on a stream of pieces (`new/1`, `feed/2`, `finish/1`, `stream/2`),
  where a tag split across pieces is held back until it is complete.
  """

  @open "<think>"
  @close "</think>"

  defstruct mode: :content, buf: ""

  @typedoc "The state of an incremental split."
  @type t :: %__MODULE__{mode: :content | :reasoning, buf: String.t()}
  @typedoc "A piece of reasoning or of the answer."
  @type part :: {:reasoning, String.t()} | {:content, String.t()}

  @doc """
  `{reasoning, content}` of a complete text; `reasoning` is `nil` without a `<think>` block.
  A text with a closing tag only (the template opened the block) counts as reasoning up to it.
  """
  @spec parse(String.t()) :: {String.t() | nil, String.t()}
  def parse(text) when is_binary(text) do
    cond do
      String.contains?(text, @open) ->
        [before, rest] = String.split(text, @open, parts: 2)
        {reasoning, after_} = split_close(rest)
        {String.trim(reasoning), String.trim_leading(before <> after_)}

      String.contains?(text, @close) ->
        {reasoning, after_} = split_close(text)
        {String.trim(reasoning), String.trim_leading(after_)}

      true ->
        {nil, text}
    end
  end

  defp split_close(text) do
    case String.split(text, @close, parts: 2) do
      [r, a] -> {r, a}
      [r] -> {r, ""}
    end
  end

  @doc "A new incremental split; `in_thinking: true` when the prompt already opened the block."
  @spec new(keyword()) :: t()
  def new(opts \\ []), do: %__MODULE__{mode: if(opts[:in_thinking], do: :reasoning, else: :content)}

  @doc "Feeds one piece: the new state and the parts now complete."
  @spec feed(t(), String.t()) :: {t(), [part()]}
  def feed(%__MODULE__{} = st, piece) when is_binary(piece), do: scan(%{st | buf: st.buf <> piece}, [])

  defp scan(%{mode: mode, buf: buf} = st, acc) do
    tag = if mode == :content, do: @open, else: @close
    kind = if mode == :content, do: :content, else: :reasoning

    case :binary.split(buf, tag) do
      [before, rest] ->
        scan(%{st | mode: flip(mode), buf: rest}, emit(acc, kind, before))

      [_] ->
        keep = held(buf, tag)
        {%{st | buf: binary_part(buf, byte_size(buf) - keep, keep)}, emit(acc, kind, binary_part(buf, 0, byte_size(buf) - keep))}
    end
  end

  defp flip(:content), do: :reasoning
  defp flip(:reasoning), do: :content

  defp emit(acc, _kind, ""), do: acc
  defp emit(acc, kind, text), do: acc ++ [{kind, text}]

  # Bytes at the end of `buf` that may be the start of `tag`.
  defp held(buf, tag) do
    max = min(byte_size(buf), byte_size(tag) - 1)
    Enum.find(max..1//-1, 0, fn n -> binary_part(tag, 0, n) == binary_part(buf, byte_size(buf) - n, n) end)
  end

  @doc "The parts still held back at the end of the stream."
  @spec finish(t()) :: [part()]
  def finish(%__MODULE__{buf: ""}), do: []
  def finish(%__MODULE__{mode: :content, buf: b}), do: [{:content, b}]
  def finish(%__MODULE__{mode: :reasoning, buf: b}), do: [{:reasoning, b}]

  @doc "Splits a stream of text pieces into a stream of parts."
  @spec stream(Enumerable.t(), keyword()) :: Enumerable.t()
  def stream(pieces, opts \\ []) do
    pieces
    |> Stream.concat([:end])
    |> Stream.transform(new(opts), fn
      :end, st -> {finish(st), st}
      piece, st -> feed(st, piece) |> then(fn {st, parts} -> {parts, st} end)
    end)
  end
end
