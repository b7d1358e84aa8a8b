"""Run a documentation snippet as written, top-level ``await`` included (as a notebook does).

``python run_snippet.py FILE`` — used to serve the docs' ``serve_stdio`` example verbatim.
"""

import ast
import asyncio
import inspect
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    code = compile(f.read(), sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__snippet__"})
if inspect.iscoroutine(result):
    asyncio.run(result)
