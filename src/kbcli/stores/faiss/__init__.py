"""kbcli.stores.faiss."""
