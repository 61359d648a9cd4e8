"""kb's parameters: option values converted without Pydantic, arguments shown by their metavars.

Typer converts every value through a Pydantic ``TypeAdapter``; importing Pydantic and building
the adapters costs more CPU than the rest of a ``kb search`` (docs/benchmarks.md, "Whole
commands as CPU time"). kb's options are str, int, float, bool and Path (or lists of them), so
:class:`PlainOption` and :class:`PlainArgument` override click's documented
``Parameter.process_value`` with those plain conversions; a parameter of any other type, and
a required value that is missing (an error), keep typer's own. They also override click's
``get_usage_pieces`` and ``get_help_record`` so that an argument reads ``QUERY``, not typer's
``{QUERY}`` and ``<list[Path]>``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperArgument, TyperOption

from kbcli.errors import InvalidOptionError

if TYPE_CHECKING:
    from typer._click import Context, Parameter  # click as typer ships it (types only)

SIMPLE: tuple[type, ...] = (str, int, float, Path, bool)
TRUE = ("1", "true", "yes", "on", "y", "t")
FALSE = ("0", "false", "no", "off", "n", "f")


def plain_kind(param: TyperOption | TyperArgument) -> type | None:
    """The plain type ``param`` converts to (its list's item type for a list), or None when
    typer's conversion is needed."""
    annotation = param.type_descriptor.annotation
    if getattr(annotation, "__origin__", None) is list:
        annotation = annotation.__args__[0]
    return annotation if annotation in SIMPLE else None


def convert(kind: type, value: Any, param: TyperOption | TyperArgument, ctx: Context) -> Any:
    """One value of ``param`` as ``kind``, within the parameter's min and max."""
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
        raise typer.BadParameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)
    if kind is Path:
        return value if isinstance(value, Path) else Path(value)
    try:
        number = kind(value)
    except (TypeError, ValueError):
        name = "integer" if kind is int else "number"
        raise typer.BadParameter(
            f"{value!r} is not a valid {name}.", ctx=ctx, param=param
        ) from None
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
        raise typer.BadParameter(f"{value} must be {bounds}.", ctx=ctx, param=param)
    return number


def process(param: TyperOption | TyperArgument, ctx: Context, value: Any) -> Any:
    """What typer's ``process_value`` does, with :func:`convert` for the plain types; None
    when typer must do it (another type, or a required value missing: its error)."""
    kind = plain_kind(param)
    if kind is None or (param.required and param.value_is_missing(value)):
        return None
    many = param.multiple or param.nargs == -1
    if value is None:
        value = () if many else None
    elif many:
        if isinstance(value, str):
            raise typer.BadParameter("Value must be an iterable.", ctx=ctx, param=param)
        value = [convert(kind, item, param, ctx) for item in value]
    else:
        value = convert(kind, value, param, ctx)
    return (value,)


class PlainOption(TyperOption):
    """A typer option converted by :func:`process`."""

    def process_value(self, ctx: Context, value: Any) -> Any:
        done = process(self, ctx, value)
        if done is None:
            return super().process_value(ctx, value)
        (value,) = done
        return value if self.callback is None else self.callback(ctx, self, value)


class PlainArgument(TyperArgument):
    """A typer argument converted by :func:`process` and shown by its metavar alone."""

    def process_value(self, ctx: Context, value: Any) -> Any:
        done = process(self, ctx, value)
        if done is None:
            return super().process_value(ctx, value)
        (value,) = done
        return value if self.callback is None else self.callback(ctx, self, value)

    def get_usage_pieces(self, ctx: Context) -> list[str]:
        return [self.metavar] if self.metavar is not None else super().get_usage_pieces(ctx)

    def get_help_record(self, ctx: Context) -> tuple[str, str] | None:
        if self.metavar is None or self.hidden:
            return super().get_help_record(ctx)
        return self.metavar, (self.help or "") + ("" if self.required else "  [optional]")


def plain(params: list[Parameter]) -> list[Parameter]:
    """``params`` (a command's, from click's ``get_params``: typer's, and the help option) as
    :class:`PlainOption` and :class:`PlainArgument`.

    Typer builds its own parameter classes and offers no hook to choose them, so each one is
    given its subclass here, where click asks the command for them; the subclasses add no
    state."""
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = PlainOption
        elif type(param) is TyperArgument:
            param.__class__ = PlainArgument
    return params
