"""Serving TensorSketch graphs over standard protocols (OpenAI-compatible, A2A, AG-UI, tasks).

This distribution is the home of ``tensorsketch.serve``; its protocol apps arrive with the
serving issue. Starlette and httpx are imported only inside this package, never by
``import tensorsketch``.
"""

__all__: list[str] = []
