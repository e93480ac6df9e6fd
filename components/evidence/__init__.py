"""The evidence steps: the gate, session memory, dedup, the context pack and the assembled result."""
