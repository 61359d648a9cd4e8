"""The global options (``--db``, ``--config``, ``--store``, ``-q``, ``--debug``): kept on the
Click context for the commands, and accepted after a command's name too."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from kbcli.config.lookup import use_config_file

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    """Global options, kept on the Click context for the commands."""

    db: Path | None = None
    config: Path | None = None
    quiet: bool = False
    debug: bool = False
    store: str | None = None


def get_state(ctx: typer.Context) -> State:
    obj = ctx.find_object(State)
    return obj if obj is not None else State()


def _keep(field: str) -> Callable[[typer.Context, Any], None]:
    """The callback of a global option written after the command: its value goes to the
    :class:`State` the group's callback made (a flag only when given)."""

    def keep(ctx: typer.Context, value: Any) -> None:
        if value is None or value is False:
            return
        setattr(get_state(ctx), field, value)
        if field == "config":
            use_config_file(value)  # as the group's callback does

    return keep


def _hidden(*decls: str, field: str, **settings: Any) -> Any:
    return typer.Option(*decls, hidden=True, expose_value=False, callback=_keep(field), **settings)


#: The group's options a command takes after its name too (``kb search x -q``), hidden from
#: its help: parameter name -> (option names, annotation, default).
GLOBAL_OPTIONS: dict[str, tuple[tuple[str, ...], Any, Any]] = {
    "global_db": (
        ("--db",), Annotated[Path | None, _hidden("--db", field="db", dir_okay=False)], None
    ),
    "global_config": (
        ("--config",), Annotated[Path | None, _hidden("--config", field="config")], None
    ),
    "global_store": (("--store",), Annotated[str | None, _hidden("--store", field="store")], None),
    "global_quiet": (
        ("-q", "--quiet"), Annotated[bool, _hidden("-q", "--quiet", field="quiet")], False
    ),
    "global_debug": (("--debug",), Annotated[bool, _hidden("--debug", field="debug")], False),
}  # fmt: skip


def global_options(*own: str) -> Callable[[F], F]:
    """A command that takes kb's global options after its name too, except those named in
    ``own``, its own options of the same name (``kb eval --db``: the evaluation database)."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        extra = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind
            )
            for name, (decls, kind, default) in GLOBAL_OPTIONS.items()
            if not set(decls) & set(own)
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            for parameter in extra:
                kwargs.pop(parameter.name, None)  # applied by their callbacks
            return command(*args, **kwargs)

        # typer reads a command's options from its signature and annotations
        parameters = [*signature.parameters.values(), *extra]
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {**command.__annotations__, **{p.name: p.annotation for p in extra}}
        return run  # type: ignore[return-value]

    return decorate
