"""A process that speaks no MCP: it reads stdin and never answers (records its pid)."""

import os
import sys

with open(os.environ.get("PID_FILE", os.devnull), "w", encoding="utf-8") as f:
    f.write(str(os.getpid()))
for _line in sys.stdin:
    pass
