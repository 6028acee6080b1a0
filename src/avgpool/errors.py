"""The one exception avgpool raises for invalid input."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class AvgPoolError(ValueError):
    """An invalid attribute, dtype or shape.

    The message names the dialect, the attribute, the value and the rule, e.g.
    ``AveragePool-19: `strides` has 3 values (1, 1, 1) but the input (1, 3, 32, 32) has 2 spatial axes``.
    """


@contextlib.contextmanager
def error_context(label: str) -> Iterator[None]:
    """Prefix every AvgPoolError raised inside with the operator's label, once.

    Raise sites stay short ("`strides` has ..."); the public entry point says which operator
    (and version) was being called, so the message tells the whole story.
    """
    try:
        yield
    except AvgPoolError as err:
        message = str(err)
        if message.startswith(label + ":"):
            raise
        raise AvgPoolError(f"{label}: {message}") from None
