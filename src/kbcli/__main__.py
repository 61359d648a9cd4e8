"""``python -m kbcli``: the ``kb`` command."""

from kbcli.cli import main

if __name__ == "__main__":
    main()
