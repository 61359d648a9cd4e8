"""kbcli.agent.tools."""
