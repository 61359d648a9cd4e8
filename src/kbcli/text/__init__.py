"""kbcli.text."""
