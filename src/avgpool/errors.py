"""The one exception avgpool raises for invalid input."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class AvgPoolError(ValueError):
    """An invalid attribute, dtype or shape.

    The message names the dialect, the attribute, the value and the rule, e.g.
    ``AveragePool-19: `strides` has 3 values (1, 1, 1) but the input (1, 3, 32, 32) has 2 spatial axes``.
    """


class AvgPoolTypeError(AvgPoolError, TypeError):
    """An argument of the wrong Python type where the library avgpool follows raises a TypeError
    (``avgpool.torch``: a float ``kernel_size``, a str ``ceil_mode``, a list as ``input``).

    Both an AvgPoolError (one exception to catch for any invalid input) and a TypeError (what code
    written for torch catches), so a drop-in call keeps either handler working.
    """


def labelled(label: str, err: Exception | str) -> AvgPoolError:
    """``err`` as an AvgPoolError whose message starts with the operator's ``label``, once: the
    one place where the label is prefixed (:func:`error_context`, and the memo paths that catch
    a kernel's or numpy's error themselves).

    >>> labelled("AveragePool-22", "`x` has 3 dimensions: it must have at least 3")
    AvgPoolError('AveragePool-22: `x` has 3 dimensions: it must have at least 3')
    """
    message = str(err)
    kind = type(err) if isinstance(err, AvgPoolError) else AvgPoolError  # an AvgPoolTypeError stays one
    return kind(message if message.startswith(label + ":") else f"{label}: {message}")


@contextlib.contextmanager
def error_context(label: str) -> Iterator[None]:
    """Prefix every AvgPoolError raised inside with the operator's label, once.

    Raise sites stay short ("`strides` has ..."); the public entry point says which operator
    (and version) was being called, so the message tells the whole story.
    """
    try:
        yield
    except AvgPoolError as err:
        if str(err).startswith(label + ":"):
            raise
        raise labelled(label, err) from None
