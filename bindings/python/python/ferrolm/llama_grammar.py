"""``LlamaGrammar``: a constraint on generated text, as llama-cpp-python's class of that name.

ferrolm constrains output with llguidance: GBNF grammars (llama.cpp's format, as
:meth:`LlamaGrammar.from_string` and :meth:`LlamaGrammar.from_file` take them), JSON schemas,
llguidance's Lark grammars and regular expressions."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Union

from .errors import InvalidInputError


class LlamaGrammar:
    """A constraint given to ``create_completion(grammar=...)`` / ``create_chat_completion``."""

    def __init__(self, *, json_schema: Optional[str] = None, lark: Optional[str] = None,
                 regex: Optional[str] = None, gbnf: Optional[str] = None) -> None:
        if sum(x is not None for x in (json_schema, lark, regex, gbnf)) != 1:
            raise InvalidInputError("a LlamaGrammar has exactly one of json_schema, lark, regex, gbnf")
        self.json_schema = json_schema
        self.lark = lark
        self.regex = regex
        self.gbnf = gbnf

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
        """Output matching a GBNF grammar (llama.cpp's format, start rule ``root``). A malformed
        grammar raises ``InvalidInputError`` when it is used, naming the line and column."""
        return cls(gbnf=grammar)

    @classmethod
    def from_file(cls, file: Union[str, "os.PathLike[str]"], verbose: bool = True) -> "LlamaGrammar":
        """:meth:`from_string` of a file's text."""
        with open(file, encoding="utf-8") as f:
            return cls.from_string(f.read(), verbose=verbose)

    def params(self) -> Dict[str, Any]:
        """The :class:`ferrolm.GenParams` keywords of this constraint."""
        if self.json_schema is not None:
            return {"json_schema": self.json_schema}
        if self.lark is not None:
            return {"lark": self.lark}
        if self.gbnf is not None:
            return {"gbnf": self.gbnf}
        return {"regex": self.regex}
