defmodule Ferrolm.Sampler do
  @moduledoc """
  A checked set of sampling options (`temp:`, `top_k:`, `top_p:`, `min_p:`, `seed:`, the
  penalties, `grammar:`/`json_schema:`…), for `Ferrolm.Context.generate/4`.

  Each generation builds its sampler chain from these options (with the seed, when given), so
  the same sampler gives the same tokens each time; `reset/1` is there for code written against
  LlamaCppEx, where samplers keep state between generations.
  """

  alias Ferrolm.{Model, Options}

  @enforce_keys [:opts]
  defstruct [:opts]

  @typedoc "A sampler."
  @type t :: %__MODULE__{opts: keyword()}

  @doc "Checks the options (bad ones raise `ArgumentError`)."
  @spec create(Model.t(), keyword()) :: {:ok, t()}
  def create(%Model{}, opts \\ []) do
    Options.check!(opts, Options.sampling_keys(), "Ferrolm.Sampler.create/2")
    _ = Options.sampling(opts)
    {:ok, %__MODULE__{opts: opts}}
  end

  @doc "Returns the sampler as new (its chain is rebuilt at each generation)."
  @spec reset(t()) :: t()
  def reset(%__MODULE__{} = s), do: s
end
