defmodule Mix.Tasks.Compile.FerrolmNif do
  @moduledoc """
  Builds the NIF library (`cargo build --release -p ferrolm_nif --features opencl` in the Cargo
  workspace at `../..`) and copies it to `priv/`. Honours `CARGO_TARGET_DIR`; set `FERROLM_NIF_SKIP_BUILD=1`
  to only copy an already built library.
  """
  use Mix.Task.Compiler

  @impl true
  def run(_args) do
    root = Path.expand("../..", __DIR__)
    target = Path.expand(System.get_env("CARGO_TARGET_DIR") || "target", root)

    if System.get_env("FERROLM_NIF_SKIP_BUILD") != "1" do
      cargo = System.find_executable("cargo") || Mix.raise("cargo not found: the NIF is built with Rust")

      {_, status} =
        System.cmd(cargo, ["build", "--release", "-p", "ferrolm_nif", "--features", "opencl"],
          cd: root,
          into: IO.stream(:stdio, :line),
          stderr_to_stdout: true
        )

      if status != 0, do: Mix.raise("cargo build of the ferrolm NIF failed (exit #{status})")
    end

    lib = Enum.find(["libferrolm_nif.so", "libferrolm_nif.dylib"], &File.exists?(Path.join([target, "release", &1])))
    lib || Mix.raise("the NIF library is not in #{Path.join(target, "release")}")
    priv = Path.join(__DIR__, "priv")
    File.mkdir_p!(priv)
    dest = Path.join(priv, "libferrolm_nif.so")
    src = Path.join([target, "release", lib])

    if not File.exists?(dest) or File.stat!(src).mtime > File.stat!(dest).mtime do
      # Copy to a new file and rename: a running VM keeps its mapping of the old one.
      File.cp!(src, dest <> ".tmp")
      File.rename!(dest <> ".tmp", dest)
    end

    # Links _build/…/priv to priv/ when priv/ did not exist before this build.
    Mix.Project.build_structure()

    {:ok, []}
  end
end

defmodule Ferrolm.MixProject do
  use Mix.Project

  def project do
    [
      app: :ferrolm,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      compilers: [:ferrolm_nif] ++ Mix.compilers(),
      deps: [],
      docs: [main: "readme", extras: ["README.md"]]
    ]
  end

  def application do
    [extra_applications: [:logger]]
  end
end
