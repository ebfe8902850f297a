"""``LlamaGrammar``: a constraint on generated text, as llama-cpp-python's class of that name.

ferrolm constrains output with llguidance: JSON schemas, Lark grammars and regular expressions.
GBNF (llama.cpp's grammar format) is not supported: :meth:`LlamaGrammar.from_string` raises a
clear error and :meth:`LlamaGrammar.from_lark` takes the same grammar written in Lark."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

from .errors import InvalidInputError


class LlamaGrammar:
    """A constraint given to ``create_completion(grammar=...)`` / ``create_chat_completion``."""

    def __init__(self, *, json_schema: Optional[str] = None, lark: Optional[str] = None,
                 regex: Optional[str] = None) -> None:
        if sum(x is not None for x in (json_schema, lark, regex)) != 1:
            raise InvalidInputError("a LlamaGrammar has exactly one of json_schema, lark, regex")
        self.json_schema = json_schema
        self.lark = lark
        self.regex = regex

    @classmethod
    def from_json_schema(cls, json_schema: Union[str, Dict[str, Any]], verbose: bool = True) -> "LlamaGrammar":
        """Output valid against a JSON schema (a dict or its JSON text)."""
        text = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
        try:
            json.loads(text)
        except ValueError as e:
            raise InvalidInputError(f"the JSON schema is not valid JSON: {e}") from None
        return cls(json_schema=text)

    @classmethod
    def from_lark(cls, grammar: str) -> "LlamaGrammar":
        """Output matching a grammar in llguidance's Lark dialect (start rule ``start``)."""
        return cls(lark=grammar)

    @classmethod
    def from_regex(cls, pattern: str) -> "LlamaGrammar":
        """Output matching a regular expression in full."""
        return cls(regex=pattern)

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """GBNF grammars are not supported by ferrolm: raises ``InvalidInputError``. Write the
        grammar in Lark (:meth:`from_lark`; ``root ::= a b`` becomes ``start: a b``) or use
        :meth:`from_json_schema`."""
        raise InvalidInputError(
            "GBNF grammars are not supported by ferrolm; use LlamaGrammar.from_lark (the same "
            "rules in Lark syntax: 'root ::= x' becomes 'start: x'), from_json_schema or from_regex"
        )

    def params(self) -> Dict[str, Any]:
        """The :class:`ferrolm.GenParams` keywords of this constraint."""
        if self.json_schema is not None:
            return {"json_schema": self.json_schema}
        if self.lark is not None:
            return {"lark": self.lark}
        return {"regex": self.regex}
