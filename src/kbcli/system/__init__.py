"""kbcli.system."""
