"""The HTTP pieces every served surface of kb shares (kb mcp --http, kb ui): limits, tokens."""
