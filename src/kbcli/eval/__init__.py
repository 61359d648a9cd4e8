"""kbcli.eval."""
