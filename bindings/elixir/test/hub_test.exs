defmodule Ferrolm.HubTest do
  use ExUnit.Case, async: false
  @moduletag :model

  test "pull finds a cached catalog model through the same path as `ferrolm pull`, with progress" do
    me = self()
    {:ok, path} = Ferrolm.Hub.pull("smollm2-135m-instruct", progress: &send(me, {:progress, &1}))
    assert Path.basename(path) == Ferrolm.TestModels.smol()
    assert File.regular?(path)
    assert_received {:progress, %{stage: :done, cached: true, path: ^path}}
    assert {:error, msg} = Ferrolm.Hub.pull("no-such-model")
    assert msg =~ "unknown model"
  end
end
