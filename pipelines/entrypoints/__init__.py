"""Entry points: the command line, MCP, REST (with Dify's contract), the Agent tool; each calls `pipelines.service`."""
