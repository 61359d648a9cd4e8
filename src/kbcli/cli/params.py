"""kb's parameters: option values converted without Pydantic, arguments shown by their metavars.

Typer converts every value through a Pydantic ``TypeAdapter``; importing Pydantic and building
the adapters costs more CPU than the rest of a ``kb search`` (docs/benchmarks.md, "Whole
commands as CPU time"). kb's options are str, int, float, bool and Path (or lists of them), so
:class:`PlainOption` and :class:`PlainArgument`, subclasses of typer's public ``TyperOption``
and ``TyperArgument``, override click's documented ``Parameter.process_value`` (convert, then
the callback) with those plain conversions; a parameter of any other type, and a required
value that is missing (an error), keep typer's own. They also override click's
``get_usage_pieces`` and ``get_help_record`` so that an argument reads ``QUERY``, not typer's
``{QUERY}`` and ``<list[Path]>``.

Only public names are used: typer exports click's ``Context`` as its subclass
``typer.Context``, and kb's commands make every context one (``context_class``, see
:mod:`.group`), so the overrides take a ``typer.Context`` (narrower than the ``Context`` of
the click typer ships privately: hence their ``type: ignore[override]``).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer
from typer.core import TyperArgument, TyperOption

from kbcli.errors import InvalidOptionError

SIMPLE: tuple[type, ...] = (str, int, float, Path, bool)
TRUE = ("1", "true", "yes", "on", "y", "t")
FALSE = ("0", "false", "no", "off", "n", "f")
P = ParamSpec("P")
T = TypeVar("T")
#: A converted value of one of the :data:`SIMPLE` types.
Plain = str | int | float | Path | bool


def plain_kind(param: TyperOption | TyperArgument) -> type | None:
    """The plain type ``param`` converts to (its list's item type for a list), or None when
    typer's conversion is needed."""
    annotation = param.type_descriptor.annotation
    if getattr(annotation, "__origin__", None) is list:
        annotation = annotation.__args__[0]
    return annotation if annotation in SIMPLE else None


def convert(kind: type, value: Any, param: TyperOption | TyperArgument) -> Plain:
    """One value of ``param`` as ``kind``, within the parameter's min and max. A
    ``BadParameter`` raised here names no context or parameter: click adds both on its way
    out of ``process_value`` (its usage errors name the option and show the usage)."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if kind is str:
        return str(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in TRUE or word in FALSE:
            return word in TRUE
        raise typer.BadParameter(f"{value!r} is not a valid boolean.")
    if kind is Path:
        return value if isinstance(value, Path) else Path(value)
    try:
        number: int | float = kind(value)
    except (TypeError, ValueError):
        name = "integer" if kind is int else "number"
        raise typer.BadParameter(f"{value!r} is not a valid {name}.") from None
    if kind is float and not math.isfinite(number):
        # nan passes every range check (its comparisons are false) and inf overflows timers
        name = max(param.opts, key=len) if param.opts else param.name
        raise InvalidOptionError(f"{name} must be a finite number, got {value!r}")
    low, high = param.min, param.max
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = " and ".join(
            part
            for part in (
                f"at least {low}" if low is not None else "",
                f"at most {high}" if high is not None else "",
            )
            if part
        )
        raise typer.BadParameter(f"{value} must be {bounds}.")
    return number


def convert_value(
    kind: type, param: TyperOption | TyperArgument, value: Any
) -> Plain | list[Plain] | tuple[()] | None:
    """``value`` as click hands it over (None, one value, or a sequence for a list: the
    command line's strings or a declared default, hence ``Any``) converted
    with :func:`convert`: None becomes ``()`` for a list, as typer has it."""
    many = param.multiple or param.nargs == -1
    if value is None:
        return () if many else None
    if not many:
        return convert(kind, value, param)
    if isinstance(value, str):
        raise typer.BadParameter("Value must be an iterable.")
    return [convert(kind, item, param) for item in value]


class PlainOption(TyperOption):
    """A typer option of a plain type converted by :func:`convert_value`."""

    def process_value(self, ctx: typer.Context, value: Any) -> Any:  # type: ignore[override]
        kind = plain_kind(self)
        if kind is None or (self.required and self.value_is_missing(value)):
            return super().process_value(ctx, value)  # typer's conversion, or its error
        value = convert_value(kind, self, value)
        return value if self.callback is None else self.callback(ctx, self, value)


class PlainArgument(TyperArgument):
    """A typer argument of a plain type converted by :func:`convert_value`, shown by its
    metavar alone."""

    def process_value(self, ctx: typer.Context, value: Any) -> Any:  # type: ignore[override]
        kind = plain_kind(self)
        if kind is None or (self.required and self.value_is_missing(value)):
            return super().process_value(ctx, value)  # typer's conversion, or its error
        value = convert_value(kind, self, value)
        return value if self.callback is None else self.callback(ctx, self, value)

    def get_usage_pieces(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return [self.metavar] if self.metavar is not None else super().get_usage_pieces(ctx)

    def get_help_record(self, ctx: typer.Context) -> tuple[str, str] | None:  # type: ignore[override]
        if self.metavar is None or self.hidden:
            return super().get_help_record(ctx)
        return self.metavar, (self.help or "") + ("" if self.required else "  [optional]")


def plain(params: Iterable[object]) -> None:
    """Make typer's options and arguments among ``params`` :class:`PlainOption` and
    :class:`PlainArgument`.

    Typer builds its own parameter classes (and click its help option) and offers no hook to
    choose them, so each one is given its subclass here, where click asks a command for its
    parameters (:func:`plain_params`); the subclasses add no state."""
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = PlainOption
        elif type(param) is TyperArgument:
            param.__class__ = PlainArgument


def plain_params(get_params: Callable[P, list[T]]) -> Callable[P, list[T]]:
    """Click's documented ``Command.get_params`` (every parameter of a command: typer's, the
    help option, the completion options) with its parameters made plain (:func:`plain`).
    A command class takes it as ``get_params = plain_params(TyperCommand.get_params)``: the
    signature stays the base's, so no private name of typer's click is needed to spell it."""

    @functools.wraps(get_params)
    def get_plain_params(*args: P.args, **kwargs: P.kwargs) -> list[T]:
        params = get_params(*args, **kwargs)
        plain(params)
        return params

    return get_plain_params
