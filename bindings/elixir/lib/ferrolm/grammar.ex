defmodule Ferrolm.Grammar do
  @moduledoc """
  Grammars for `grammar:`: GBNF, llama.cpp's format (`root ::= ...`), or llguidance's Lark
  dialect (`start: ...`, or any grammar starting with `%llguidance`).
  """

  @doc """
  A grammar accepting exactly the JSON values valid against `schema` (a map or a JSON string):
  `{:ok, grammar}`. Passing `json_schema: schema` to a generation does the same.
  """
  @spec from_json_schema(map() | String.t()) :: {:ok, String.t()} | {:error, String.t()}
  def from_json_schema(schema) when is_map(schema) or is_binary(schema),
    do: Ferrolm.wrap(Ferrolm.Native.json_schema_grammar(schema))

  def from_json_schema(other), do: raise(ArgumentError, "a JSON schema is a map or a JSON string, got: #{inspect(other)}")
end
