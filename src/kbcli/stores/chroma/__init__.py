"""kbcli.stores.chroma."""
