"""kbcli.config.lookup."""
