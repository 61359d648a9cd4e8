"""kbcli.agent.mcp."""
