"""The agent tools: the shared core, the MCP server, LangChain and LlamaIndex, the audit log, lockdown and isolation."""
