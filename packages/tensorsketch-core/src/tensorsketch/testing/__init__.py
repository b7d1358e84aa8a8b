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
"""
