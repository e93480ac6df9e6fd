"""Custom Haystack components of the lookup_knowledge tool."""

import os

# Haystack reads this when it is first imported; no network at run time (telemetry would try to phone home)
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
