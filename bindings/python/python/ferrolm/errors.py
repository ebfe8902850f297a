"""Exceptions raised by ferrolm. Every one derives from :class:`Error`."""


class Error(Exception):
    """Base class of every ferrolm error (a failed model load, an engine that stopped, …)."""


class InvalidInputError(Error, ValueError):
    """Bad arguments: a prompt that does not fit, an unknown option, a schema that does not compile."""


class ModelNotFoundError(Error, FileNotFoundError):
    """The model file or catalog name does not exist."""


class EngineBusyError(Error):
    """The engine's queue is full; retry later."""


__all__ = ["Error", "InvalidInputError", "ModelNotFoundError", "EngineBusyError"]
