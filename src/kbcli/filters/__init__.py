"""kbcli.filters.model."""
