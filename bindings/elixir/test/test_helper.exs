defmodule Ferrolm.TestModels do
  @moduledoc false
  # Finds the test models the way the Rust tests do: $FERROLM_MODEL_DIR, else
  # $FERROLM_CACHE_DIR/models, else <XDG cache>/ferrolm/models. A missing model (or CLI binary)
  # fails under CI=true and skips the test otherwise.

  @smol "SmolLM2-135M-Instruct.Q4_1.gguf"
  @gemma "gemma-3-270m-q4_k_m.gguf"

  def smol, do: @smol
  def gemma, do: @gemma

  def dir do
    cond do
      (d = System.get_env("FERROLM_MODEL_DIR")) not in [nil, ""] -> d
      (d = System.get_env("FERROLM_CACHE_DIR")) not in [nil, ""] -> Path.join(d, "models")
      (d = System.get_env("XDG_CACHE_HOME")) not in [nil, ""] -> Path.join([d, "ferrolm", "models"])
      true -> Path.expand("~/.cache/ferrolm/models")
    end
  end

  def path(name), do: Path.join(dir(), name)
  def available?(name), do: File.regular?(path(name))

  def ci?, do: String.downcase(System.get_env("CI", "")) in ["true", "1"]

  # The ferrolm CLI: $FERROLM_BIN, else <target>/release/ferrolm of the workspace.
  def cli do
    case System.get_env("FERROLM_BIN") do
      b when b not in [nil, ""] ->
        b

      _ ->
        root = Path.expand("../..", __DIR__ |> Path.dirname())
        Path.join([Path.expand(System.get_env("CARGO_TARGET_DIR") || "target", root), "release", "ferrolm"])
    end
  end

  def missing do
    models = for m <- [@smol, @gemma], not available?(m), do: "model #{m} not found in #{dir()}"
    bin = if File.regular?(cli()), do: [], else: ["ferrolm CLI not found at #{cli()} (set FERROLM_BIN)"]
    models ++ bin
  end
end

case Ferrolm.TestModels.missing() do
  [] ->
    ExUnit.start()

  missing ->
    msg = Enum.join(missing, "; ")

    if Ferrolm.TestModels.ci?() do
      IO.puts(:stderr, "error: #{msg}; CI=true requires them (run scripts/fetch-test-models.sh)")
      System.halt(1)
    else
      IO.puts(:stderr, "notice: skipping the tests that need models: #{msg}")
      ExUnit.start(exclude: [:model])
    end
end
