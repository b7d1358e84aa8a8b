"""Drift detectors on synthetic streams with a known change point: detected within a bound,
silent on long stationary streams, latched, and alerts delivered to a real webhook."""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from tensorsketch.eval import (
    Baseline,
    DriftMonitor,
    PageHinkley,
    WebhookReporter,
    ks_2samp,
    psi,
    two_proportion_z,
)


def record(
    passed: bool, latency: float = 100.0, cost: float = 0.01, grader_ok: bool | None = None
) -> dict[str, Any]:
    ok = passed if grader_ok is None else grader_ok
    return {
        "type": "trial",
        "passed": passed,
        "latency_ms": latency,
        "cost_usd": cost,
        "grades": [{"grader": "safety", "passed": ok, "score": 1.0 if ok else 0.0}],
    }


def baseline(rng: random.Random, **extra: Any) -> Baseline:
    return Baseline(
        pass_rate=0.95,
        n=500,
        grader_pass_rates={"safety": 0.95},
        mean_cost_usd=0.01,
        mean_latency_ms=100.0,
        samples={"latency_ms": [rng.gauss(100, 15) for _ in range(500)]},
        **extra,
    )


def first_alert(monitor: DriftMonitor, stream: list[dict[str, Any]], metric: str) -> int | None:
    for i, item in enumerate(stream):
        for alert in monitor.observe(item):
            if alert.metric == metric:
                return i
    return None


def test_pass_rate_drop_is_detected_within_a_bound() -> None:
    rng = random.Random(1)
    monitor = DriftMonitor(baseline(rng), distributions=())
    change = 300
    stream = [record(rng.random() < (0.95 if i < change else 0.6)) for i in range(change + 400)]
    at = first_alert(monitor, stream, "pass_rate")
    assert at is not None and change <= at <= change + 100, at


def test_one_grader_collapsing_trips_on_its_own() -> None:
    rng = random.Random(2)
    monitor = DriftMonitor(baseline(rng), distributions=())
    stream = [record(True, grader_ok=(i < 100 or rng.random() < 0.5)) for i in range(400)]
    hits = {a.metric for item in stream for a in monitor.observe(item)}
    assert "grader:safety" in hits


def test_latency_shift_is_found_by_page_hinkley_relative_to_the_baseline() -> None:
    rng = random.Random(3)
    monitor = DriftMonitor(baseline(rng), distributions=())
    change = 500
    stream = [
        record(True, latency=rng.gauss(100 if i < change else 130, 15)) for i in range(change + 300)
    ]
    at = first_alert(monitor, stream, "latency_ms")
    assert at is not None and change <= at <= change + 60, at


def test_a_stream_shifted_from_its_first_record_is_caught() -> None:
    rng = random.Random(4)
    monitor = DriftMonitor(baseline(rng), distributions=())
    stream = [record(True, cost=rng.gauss(0.02, 0.002)) for _ in range(50)]  # twice the baseline
    at = first_alert(monitor, stream, "cost_usd")
    assert at is not None and at < 15


def test_a_wider_latency_distribution_is_found_by_psi_and_ks() -> None:
    rng = random.Random(5)
    monitor = DriftMonitor(baseline(rng), window=200, check_every=10)
    stream = [record(True, latency=rng.gauss(100, 15 if i < 300 else 45)) for i in range(700)]
    metrics: dict[str, int] = {}
    for i, item in enumerate(stream):
        for alert in monitor.observe(item):
            metrics.setdefault(alert.metric, i)
    assert "psi:latency_ms" in metrics and "ks:latency_ms" in metrics
    assert all(at >= 300 for at in metrics.values()), metrics


def test_long_stationary_streams_raise_no_alert() -> None:
    rng = random.Random(6)
    monitor = DriftMonitor(baseline(rng), check_every=25)
    for _ in range(20_000):
        ok = rng.random() < 0.95
        monitor.observe(record(ok, latency=rng.gauss(100, 15), cost=rng.gauss(0.01, 0.0015)))
    assert monitor.alerts == [] or len(monitor.alerts) / monitor.seen < 1e-3, monitor.alerts
    rate_alerts = [a for a in monitor.alerts if a.metric in ("pass_rate", "latency_ms", "cost_usd")]
    assert rate_alerts == []


def test_a_sustained_regression_fires_once_and_rearms_after_recovery() -> None:
    rng = random.Random(7)
    monitor = DriftMonitor(baseline(rng), distributions=())
    phases = [(0.95, 200), (0.5, 300), (0.95, 600), (0.5, 300)]
    stream = [record(rng.random() < p) for p, n in phases for _ in range(n)]
    fired = [a for item in stream for a in monitor.observe(item) if a.metric == "pass_rate"]
    assert len(fired) == 2, [a.at for a in fired]
    assert 200 < fired[0].at < 300 and 1100 < fired[1].at < 1200


def test_the_statistics_against_direct_computations() -> None:
    # z: (0.8 - 0.9) / sqrt(p(1-p)(1/n1 + 1/n2)) with the pooled p
    pooled = (0.9 * 100 + 0.8 * 100) / 200
    assert two_proportion_z(0.9, 100, 0.8, 100) == pytest.approx(
        -0.1 / math.sqrt(pooled * (1 - pooled) * 0.02)
    )
    rng = random.Random(8)
    a = [rng.gauss(0, 1) for _ in range(300)]
    b = [rng.gauss(0.5, 1) for _ in range(200)]
    d, p = ks_2samp(a, b)
    brute = max(
        abs(sum(x <= t for x in a) / len(a) - sum(y <= t for y in b) / len(b)) for t in a + b
    )
    assert d == pytest.approx(brute) and p < 0.01
    same_d, same_p = ks_2samp(a, [rng.gauss(0, 1) for _ in range(200)])
    assert same_p > 1e-3 and same_d < d
    assert psi(a, a) == pytest.approx(0.0, abs=1e-9)
    assert psi(a, b) > 0.1
    with pytest.raises(ValueError, match="non-empty"):
        psi([], a)


def test_page_hinkley_textbook_form_uses_the_running_mean() -> None:
    detector = PageHinkley(delta=0.05, threshold=3.0)
    rng = random.Random(9)
    fired_at = next(i for i in range(1000) if detector.update(rng.gauss(0 if i < 200 else 1, 0.2)))
    assert 200 <= fired_at < 230


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/alerts", received
    server.shutdown()
    server.server_close()


async def test_alerts_go_to_a_webhook(webhook: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = webhook
    hook = WebhookReporter(url, only={"drift_alert"})
    monitor = DriftMonitor(baseline(random.Random(10)), reporter=hook, distributions=())
    for _ in range(60):
        await monitor.emit(record(False))
    await hook.emit({"type": "trial", "passed": True})  # filtered out by `only`
    assert [r["metric"] for r in received] == ["pass_rate", "grader:safety"]
    assert received[0]["type"] == "drift_alert" and hook.sent == 2 and hook.failed == 0


async def test_an_unreachable_webhook_is_counted_not_raised() -> None:
    hook = WebhookReporter("http://127.0.0.1:9/alerts", timeout=2)
    await hook.emit({"type": "drift_alert"})
    assert hook.failed == 1
    with pytest.raises(ValueError, match="http"):
        WebhookReporter("ftp://example")
