"""kbcli.search."""
