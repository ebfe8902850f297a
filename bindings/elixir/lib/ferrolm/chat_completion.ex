defmodule Ferrolm.ChatCompletion do
  @moduledoc """
  A chat reply in the shape of OpenAI's `chat.completion` object: `choices` with one
  `%{index: 0, message: %{role: "assistant", content: …, reasoning_content: …}, finish_reason: …}`
  and `usage` with token counts.
  """

  defstruct [:id, :created, :model, object: "chat.completion", choices: [], usage: %{}]

  @typedoc "A chat completion."
  @type t :: %__MODULE__{
          id: String.t(),
          object: String.t(),
          created: integer(),
          model: String.t(),
          choices: [map()],
          usage: map()
        }

  @doc false
  def new(model, text, info) do
    {reasoning, content} = Ferrolm.Thinking.parse(text)

    %__MODULE__{
      id: "chatcmpl-" <> Integer.to_string(System.unique_integer([:positive])),
      created: System.os_time(:second),
      model: model,
      choices: [
        %{
          index: 0,
          message: %{role: "assistant", content: content, reasoning_content: reasoning},
          finish_reason: finish_reason(info.finish_reason)
        }
      ],
      usage: %{
        prompt_tokens: info.prompt_tokens,
        completion_tokens: info.completion_tokens,
        total_tokens: info.prompt_tokens + info.completion_tokens
      }
    }
  end

  @doc false
  # The library's finish reasons in OpenAI's words.
  def finish_reason(r) when r in ["length", "context"], do: "length"
  def finish_reason(r) when r in ["eog", "stop"], do: "stop"
  def finish_reason(r), do: r
end

defmodule Ferrolm.ChatCompletionChunk do
  @moduledoc """
  One piece of a streamed chat reply, in the shape of OpenAI's `chat.completion.chunk`: the
  first carries `delta: %{role: "assistant"}`, the next ones `delta: %{content: …}` (or
  `reasoning_content:` inside a `<think>` block), the last an empty delta, the `finish_reason` and
  `usage`.
  """

  defstruct [:id, :created, :model, object: "chat.completion.chunk", choices: [], usage: nil]

  @typedoc "A chat completion chunk."
  @type t :: %__MODULE__{
          id: String.t(),
          object: String.t(),
          created: integer(),
          model: String.t(),
          choices: [map()],
          usage: map() | nil
        }

  @doc false
  def stream(events, model) do
    Stream.transform(events, nil, fn
      ev, nil ->
        base = %__MODULE__{id: "chatcmpl-#{System.unique_integer([:positive])}", created: System.os_time(:second), model: model}
        {first, st} = step(ev, {base, Ferrolm.Thinking.new()})
        {[chunk(base, %{role: "assistant"}, nil) | first], st}

      ev, st ->
        step(ev, st)
    end)
  end

  defp step({:token, t}, {base, th}) do
    {th, parts} = Ferrolm.Thinking.feed(th, t)
    {Enum.map(parts, &part(base, &1)), {base, th}}
  end

  defp step({:done, rest, info}, {base, th}) do
    {th, parts} = Ferrolm.Thinking.feed(th, rest)
    tail = Enum.map(parts ++ Ferrolm.Thinking.finish(th), &part(base, &1))

    usage = %{
      prompt_tokens: info.prompt_tokens,
      completion_tokens: info.completion_tokens,
      total_tokens: info.prompt_tokens + info.completion_tokens
    }

    last = %{chunk(base, %{}, Ferrolm.ChatCompletion.finish_reason(info.finish_reason)) | usage: usage}
    {tail ++ [last], {base, th}}
  end

  defp part(base, {:content, t}), do: chunk(base, %{content: t}, nil)
  defp part(base, {:reasoning, t}), do: chunk(base, %{reasoning_content: t}, nil)

  defp chunk(base, delta, finish), do: %{base | choices: [%{index: 0, delta: delta, finish_reason: finish}]}
end
