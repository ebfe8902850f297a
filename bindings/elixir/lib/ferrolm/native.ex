defmodule Ferrolm.Native do
  @moduledoc false
  # The NIF functions (Rust crate native/ferrolm_nif). Use the public modules instead.

  @on_load :load_nif

  def load_nif do
    path = :filename.join(:code.priv_dir(:ferrolm), ~c"libferrolm_nif")
    :erlang.load_nif(path, 0)
  end

  defp nif, do: :erlang.nif_error(:nif_not_loaded)

  def load_model(_path, _backend, _n_threads), do: nif()
  def model_info(_model), do: nif()
  def tokenize(_model, _text, _add_special, _parse_special), do: nif()
  def detokenize(_model, _ids), do: nif()
  def token_to_piece(_model, _id), do: nif()
  def vocab_info(_model), do: nif()
  def is_eog(_model, _id), do: nif()
  def apply_chat_template(_model, _messages, _template, _kwargs), do: nif()
  def chat_prompt_tokens(_model, _messages, _template, _kwargs), do: nif()
  def embed(_model, _texts, _pooling, _normalize), do: nif()
  def is_reranker(_model), do: nif()
  def rerank(_model, _query, _documents), do: nif()
  def json_schema_grammar(_schema), do: nif()
  def context_create(_model, _opts), do: nif()
  def context_generate(_ctx, _tokens, _params), do: nif()
  def context_stream(_ctx, _tokens, _params, _pid, _id), do: nif()
  def stream_cancel(_stream), do: nif()
  def context_clear(_ctx), do: nif()
  def context_info(_ctx), do: nif()
  def server_start(_model, _config, _strategy_pid, _tick_pid), do: nif()
  def server_submit(_server, _tokens, _params, _pid, _id), do: nif()
  def request_cancel(_request), do: nif()
  def server_stats(_server), do: nif()
  def strategy_reply(_reply, _seq, _decode, _prefill), do: nif()
  def hub_pull(_name, _pid, _id), do: nif()
end
