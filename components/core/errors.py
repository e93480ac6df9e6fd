"""Errors every layer may raise or catch, so that callers need not import the layer that raises them."""


class StoreUnavailableError(RuntimeError):
    """The knowledge store could not be started or reached; the message says why and what to do."""
