"""Evaluating agents: cases, graders, pass@k, online monitoring and drift detection.

This distribution is the home of ``tensorsketch.eval``; the harness arrives with the eval issue.
"""

__all__: list[str] = []
