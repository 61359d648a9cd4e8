"""kbcli.stores.memory.store."""
