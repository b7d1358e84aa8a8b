"""Test kits for people extending TensorSketch (they import pytest; runtime code never does).

* :mod:`tensorsketch.testing.backend_conformance` — the behaviour every ``Backend`` must have,
  as a test class to subclass with a fixture that builds your backend.
* :mod:`tensorsketch.testing.run_store_conformance` — the behaviour every run store must have.
* :mod:`tensorsketch.testing.runs` — small graphs that hang, wait for an event or need an
  approval, for tests of code built on ``AsyncRunner``.
* :mod:`tensorsketch.testing.crash` — the crash harness: run a graph with journaled side
  effects in a child process, SIGKILL it at every checkpoint/journal boundary in turn, resume,
  and check every effect ran exactly once.
* :mod:`tensorsketch.testing.order` — the order scenario the conformance suite and the crash
  harness both run (charge, a ``Send`` fan-out of shipments, a note), with the side effects
  counted however the check needs.

And the kit the project's own test suites share (any distribution's tests can import it, since
it ships with the core):

* :mod:`tensorsketch.testing.services` — the PostgreSQL/Redis addresses the tests use and
  names private to one run and pytest-xdist worker; :mod:`tensorsketch.testing.postgres_server`
  and :mod:`tensorsketch.testing.redis_server` check the servers answer and hand out private
  schemas, databases and key prefixes.
* :mod:`tensorsketch.testing.ports` — free ports on 127.0.0.1.
* :mod:`tensorsketch.testing.live_server` — uvicorn serving an ASGI app on a free port.
* :mod:`tensorsketch.testing.browser` — headless Chromium (``/usr/bin/chromium``) through
  Playwright, or a module skipped with the reason.
"""
