"""kbcli.providers."""
