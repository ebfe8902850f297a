defmodule Ferrolm.Model do
  @moduledoc """
  A loaded model (GGUF file or Hugging Face folder). Load one with `Ferrolm.load_model/2`.

  The model is a resource freed by the garbage collector when no process, context or server
  refers to it any more.
  """

  @enforce_keys [:ref, :path]
  defstruct [:ref, :path]

  @typedoc "A loaded model."
  @type t :: %__MODULE__{ref: reference(), path: String.t()}

  @doc "Loads a model; see `Ferrolm.load_model/2`."
  @spec load(Path.t(), keyword()) :: {:ok, t()} | {:error, String.t()}
  def load(path, opts \\ []), do: Ferrolm.load_model(path, opts)

  @doc "Everything `desc/1`…`chat_template/1` return, as one map."
  @spec info(t()) :: map()
  def info(%__MODULE__{ref: ref}), do: Ferrolm.Native.model_info(ref)

  @doc "A one-line description (architecture, name, layers, parameters)."
  @spec desc(t()) :: String.t()
  def desc(m), do: info(m).desc

  @doc "Number of parameters."
  @spec n_params(t()) :: non_neg_integer()
  def n_params(m), do: info(m).n_params

  @doc "Size of the weights in bytes."
  @spec size(t()) :: non_neg_integer()
  def size(m), do: info(m).size

  @doc "Context length the model was trained with."
  @spec n_ctx_train(t()) :: pos_integer()
  def n_ctx_train(m), do: info(m).n_ctx_train

  @doc "Embedding width."
  @spec n_embd(t()) :: pos_integer()
  def n_embd(m), do: info(m).n_embd

  @doc "Number of layers."
  @spec n_layer(t()) :: pos_integer()
  def n_layer(m), do: info(m).n_layer

  @doc "Number of attention heads."
  @spec n_head(t()) :: pos_integer()
  def n_head(m), do: info(m).n_head

  @doc "The model's Jinja chat template, or `nil`."
  @spec chat_template(t()) :: String.t() | nil
  def chat_template(m), do: info(m).chat_template
end
