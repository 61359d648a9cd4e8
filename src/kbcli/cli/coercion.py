"""Option values converted without Pydantic, and arguments shown by their metavars."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import typer


class PlainCoercion:
    """Converts str, int, float and Path option values (and lists of them) without Pydantic.

    Typer coerces every non-flag value through a Pydantic ``TypeAdapter``; importing Pydantic
    and building the adapters costs a few hundred milliseconds per ``kb`` run. Our options only
    need these plain conversions, so each parameter gets one of these instead; a parameter of
    any other type (or a Typer without this hook) keeps Typer's own coercion.
    """

    SIMPLE = (str, int, float, Path, bool)
    TRUE = ("1", "true", "yes", "on", "y", "t")
    FALSE = ("0", "false", "no", "off", "n", "f")

    def __init__(self, kind: type, minimum: Any = None, maximum: Any = None):
        self.kind = kind
        self.minimum = minimum
        self.maximum = maximum

    @classmethod
    def install(cls, params: list[Any]) -> None:
        for param in params:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is None or getattr(param, "_runtime_param", None) is not None:
                continue
            annotation = descriptor.annotation
            if getattr(annotation, "__origin__", None) is list:
                annotation = annotation.__args__[0]
            if annotation not in cls.SIMPLE:
                continue
            info = descriptor.parameter_info
            param._runtime_param = cls(annotation, info.min, info.max)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if many:
            if isinstance(value, str):
                raise typer.BadParameter("Value must be an iterable.", ctx=ctx, param=param)
            return [self.convert(item, param, ctx) for item in value]
        return self.convert(value, param, ctx)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, bytes):
            value = os.fsdecode(value)
        if self.kind is str:
            return str(value)
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower()
            if word in self.TRUE or word in self.FALSE:
                return word in self.TRUE
            raise typer.BadParameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)
        if self.kind is Path:
            return value if isinstance(value, Path) else Path(value)
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            name = "integer" if self.kind is int else "number"
            raise typer.BadParameter(
                f"{value!r} is not a valid {name}.", ctx=ctx, param=param
            ) from None
        if self.kind is float and not math.isfinite(number):
            # nan passes every range check (its comparisons are false) and inf overflows timers
            from kbcli.errors import InvalidOptionError

            name = max(param.opts, key=len) if param.opts else param.name
            raise InvalidOptionError(f"{name} must be a finite number, got {value!r}")
        low, high = self.minimum, self.maximum
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


def plain_arguments(params: list[Any]) -> None:
    """Show each argument by its metavar alone (``QUERY``, ``PATH...``), not Typer's
    ``{QUERY}`` and ``<list[Path]>`` type names."""
    from typer.core import TyperArgument

    for param in params:
        if not isinstance(param, TyperArgument) or param.metavar is None:
            continue
        metavar = param.metavar

        def usage(metavar: str = metavar) -> str:
            return metavar

        def record(ctx: Any, param: Any = param, metavar: str = metavar) -> tuple[str, str]:
            return metavar, (param.help or "") + ("" if param.required else "  [optional]")

        param._usage_display_name = usage  # type: ignore[method-assign]
        param.get_help_record = record  # type: ignore[method-assign]
