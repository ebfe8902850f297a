defmodule Ferrolm.Tokenizer do
  @moduledoc "The model's tokenizer: text to token ids and back."

  alias Ferrolm.{Model, Native}

  @doc """
  Token ids of `text`. Options: `add_special:` (default `true`: a BOS token where the model
  wants one), `parse_special:` (default `true`: `<|im_start|>` and the like become their tokens).
  """
  @spec encode(Model.t(), String.t(), keyword()) :: {:ok, [non_neg_integer()]} | {:error, String.t()}
  def encode(%Model{ref: ref}, text, opts \\ []) when is_binary(text) do
    Ferrolm.Options.check!(opts, [:add_special, :parse_special], "Ferrolm.Tokenizer.encode/3")
    Native.tokenize(ref, text, Keyword.get(opts, :add_special, true), Keyword.get(opts, :parse_special, true))
    |> Ferrolm.wrap()
  end

  @doc "The text of token ids."
  @spec decode(Model.t(), [non_neg_integer()]) :: {:ok, String.t()} | {:error, String.t()}
  def decode(%Model{ref: ref}, ids) when is_list(ids), do: Ferrolm.wrap(Native.detokenize(ref, ids))

  @doc "The bytes of one token (may be part of a UTF-8 character)."
  @spec token_to_piece(Model.t(), non_neg_integer()) :: binary()
  def token_to_piece(%Model{ref: ref}, id) when is_integer(id) and id >= 0, do: Ferrolm.unwrap!(Native.token_to_piece(ref, id))

  @doc "Vocabulary size."
  @spec vocab_size(Model.t()) :: pos_integer()
  def vocab_size(%Model{ref: ref}), do: elem(Native.vocab_info(ref), 0)

  @doc "Beginning-of-sequence token id, or `nil`."
  @spec bos_token(Model.t()) :: non_neg_integer() | nil
  def bos_token(%Model{ref: ref}), do: elem(Native.vocab_info(ref), 1)

  @doc "End-of-sequence token id, or `nil`."
  @spec eos_token(Model.t()) :: non_neg_integer() | nil
  def eos_token(%Model{ref: ref}), do: elem(Native.vocab_info(ref), 2)

  @doc "Whether `id` ends generation (EOS, end of turn…)."
  @spec eog?(Model.t(), non_neg_integer()) :: boolean()
  def eog?(%Model{ref: ref}, id) when is_integer(id) and id >= 0, do: Native.is_eog(ref, id)
end
