"""Writes :mod:`.help_cache`'s store: the root help rendered by typer at every width.

``python -m kbcli.cli.help_store`` after a change to a command or an option (the reader,
:mod:`.help_cache`, never imports this module or the application: that is its point).
"""

from __future__ import annotations

import zlib

from kbcli.cli.help_cache import MAX_WIDTH, MIN_WIDTH, STORE, fingerprint


def render(width: int) -> str:
    """The root help as typer prints it at content ``width`` (imports the whole application)."""
    import contextlib
    import io

    import typer.main

    from kbcli.cli import app

    out = io.StringIO()
    command = typer.main.get_command(app)
    with contextlib.redirect_stdout(out):
        command.main(["--help"], prog_name="kb", standalone_mode=False, terminal_width=width)
    return out.getvalue()


def build() -> bytes:
    """The store's bytes: fingerprint, width -> text index, the distinct texts (ASCII only, so
    writing one needs no encoding choice)."""
    texts: list[str] = []
    index: list[str] = []
    for width in range(MIN_WIDTH, MAX_WIDTH + 1):
        text = render(width)
        if not text.isascii() or "\0" in text:
            raise ValueError(f"kb --help at width {width} is not plain ASCII: cannot store it")
        if text not in texts:
            texts.append(text)
        index.append(str(texts.index(text)))
    blob = "\0".join([fingerprint(), ",".join(index), *texts])
    return zlib.compress(blob.encode("utf-8"), 9)


if __name__ == "__main__":
    with open(STORE, "wb") as out:
        out.write(build())
    print(f"wrote {STORE}")
