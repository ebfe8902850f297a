defmodule Ferrolm.Telemetry do
  @moduledoc """
  Telemetry events of `Ferrolm.Server`, sent through `:telemetry` when the host application has
  it (the package has no dependency of its own):

    * `[:ferrolm, :server, :request, :done]`: measurements `prompt_tokens`, `cached_tokens`,
      `completion_tokens`, `queue_ms`, `prompt_ms`, `decode_ms`, `ttft_ms` (queue and prompt),
      `duration_ms`, `tokens_per_second` (decode); metadata `server`, `finish_reason`.
    * `[:ferrolm, :server, :tick]`: measurements `batch_tokens`, `prompt_tokens`,
      `generated_tokens`, `busy_slots`, `queue_depth`, `plan_us`, `duration_us`,
      `tokens_per_second` (batch tokens over the tick's time); metadata `server`.
  """

  @doc false
  def execute(event, measurements, metadata) do
    if Code.ensure_loaded?(:telemetry) do
      apply(:telemetry, :execute, [event, measurements, metadata])
    end

    :ok
  end
end
