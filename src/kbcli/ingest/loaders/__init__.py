"""kbcli.ingest.loaders.registry."""
