defmodule Ferrolm.Error do
  @moduledoc "Raised when a generation fails inside the engine while a stream is read."
  defexception [:message]
end
