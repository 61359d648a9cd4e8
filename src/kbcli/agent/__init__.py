"""kbcli.agent."""
