"""``tensorsketch doctor``: what is installed, from where, what it can reach, and what is wrong.

A package index may serve distributions named like ours that are someone else's code (an
unrelated ``tensorsketch`` and an older ``tensorsketch-core`` exist), and a partial install
from a clone mixes them in silently. The doctor reads every installed ``tensorsketch*``
distribution's metadata (version, ``direct_url.json``: editable, a folder, a wheel file or an
index) and flags a first-party name that is not ours, versions that differ, and clones that
are mixed. It then knocks on PostgreSQL and Redis (only on 127.0.0.1 or an address given on
the command line, with a short timeout, over the bare wire protocol, so it needs no driver)
and looks for the browser the Studio and HTML report tests drive.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import socket
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from tensorsketch._arguments import seconds

__all__ = [
    "FIRST_PARTY",
    "Installed",
    "Probe",
    "Report",
    "check",
    "configure_cli",
    "diagnose",
    "installed",
    "probe_postgres",
    "probe_redis",
    "run_cli",
]

#: The distributions this project publishes; each but the meta-package registers a plugin in
#: the ``tensorsketch`` entry-point group, and the meta-package requires ``tensorsketch-core``.
FIRST_PARTY = (
    "tensorsketch",
    "tensorsketch-core",
    "tensorsketch-canvas",
    "tensorsketch-providers",
    "tensorsketch-backends",
    "tensorsketch-serve",
    "tensorsketch-interop",
    "tensorsketch-eval",
    "tensorsketch-ray",
)
META = "tensorsketch"
POSTGRES_DEFAULT = "postgresql://127.0.0.1:5432"
REDIS_DEFAULT = "redis://127.0.0.1:6379"
CHROMIUM = Path("/usr/bin/chromium")
#: How the README installs from a clone (every first-party name satisfied from its folder).
REINSTALL = "pip install ./packages/tensorsketch  (from the root of your clone)"


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@dataclass(frozen=True, slots=True)
class Installed:
    """One installed ``tensorsketch*`` distribution and where it came from.

    :ivar origin: ``editable`` (a folder, live), ``folder`` (built from a folder), ``file`` (a
        wheel or archive file), ``url`` (downloaded from a URL) or ``index`` (a package index:
        no ``direct_url.json``).
    :ivar source: the folder, file or URL for the first four; ``None`` for an index.
    :ivar location: the site-packages folder it is installed in.
    :ivar ours: whether its metadata is this project's (a plugin in the ``tensorsketch``
        group; for the meta-package, a requirement on ``tensorsketch-core``).
    """

    name: str
    version: str
    origin: str
    source: str | None
    location: str
    ours: bool
    first_party: bool


def _origin(dist: md.Distribution) -> tuple[str, str | None]:
    raw = dist.read_text("direct_url.json")
    if not raw:
        return "index", None
    try:
        info = json.loads(raw)
    except ValueError:
        return "index", None
    url = str(info.get("url", ""))
    parts = urlsplit(url)
    where = unquote(parts.path) if parts.scheme == "file" else url
    if "dir_info" in info:
        return ("editable" if info["dir_info"].get("editable") else "folder"), where
    if parts.scheme == "file":
        return "file", where
    return "url", where


def _ours(dist: md.Distribution, name: str) -> bool:
    if name == META:
        requires = dist.requires or []
        return any(_normal(r).startswith("tensorsketch-core") for r in requires)
    return any(point.group == "tensorsketch" for point in dist.entry_points)


def installed(dists: Iterable[md.Distribution] | None = None) -> list[Installed]:
    """Every installed distribution whose name starts with ``tensorsketch``, sorted by name."""
    found: dict[str, Installed] = {}
    for dist in md.distributions() if dists is None else dists:
        name = _normal(dist.metadata["Name"] or "")
        if not name.startswith("tensorsketch") or name in found:
            continue  # the first on sys.path is the one imported
        origin, source = _origin(dist)
        found[name] = Installed(
            name=name,
            version=dist.version,
            origin=origin,
            source=source,
            location=str(dist.locate_file("")),
            ours=_ours(dist, name),
            first_party=name in FIRST_PARTY,
        )
    return [found[name] for name in sorted(found)]


def _clone_of(item: Installed) -> str | None:
    """The clone a first-party distribution was installed from (``<clone>/packages/<dist>``)."""
    if item.origin not in ("editable", "folder") or item.source is None:
        return None
    folder = Path(item.source)
    return str(folder.parent.parent) if folder.parent.name == "packages" else None


def diagnose(items: list[Installed]) -> list[str]:
    """What is wrong with this set of distributions, each with how to fix it."""
    problems: list[str] = []
    ours = [i for i in items if i.first_party]
    for item in ours:
        if not item.ours:
            where = f"from {item.source}" if item.source else "from a package index"
            problems.append(
                f"{item.name} {item.version} ({where}) is not TensorSketch: its metadata "
                "lacks this project's plugin entry point (or, for the meta-package, its "
                "requirement on tensorsketch-core). An index serves unrelated code under this "
                f"name. Uninstall it (pip uninstall {item.name}) and install from a clone: "
                f"{REINSTALL}."
            )
    genuine = [i for i in ours if i.ours]
    versions = sorted({i.version for i in genuine})
    if len(versions) > 1:
        shown = ", ".join(f"{i.name} {i.version}" for i in genuine)
        problems.append(
            f"the TensorSketch distributions have different versions ({shown}); they are "
            f"released together and pin each other. Reinstall them together: {REINSTALL}."
        )
    clones = sorted({c for c in (_clone_of(i) for i in genuine) if c is not None})
    if len(clones) > 1:
        problems.append(
            f"the TensorSketch distributions come from different clones ({', '.join(clones)}); "
            f"reinstall them from one: {REINSTALL}."
        )
    if genuine and "tensorsketch-core" not in {i.name for i in genuine}:
        problems.append(
            "tensorsketch-core (the engine every other distribution needs) is not installed "
            f"as TensorSketch's own; {REINSTALL}."
        )
    return problems


@dataclass(frozen=True, slots=True)
class Probe:
    """Whether a service answered at an address (``detail`` says what it answered or why
    not, and whether its Python driver is installed)."""

    service: str
    address: str
    reachable: bool
    detail: str


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url if "://" in url else f"tcp://{url}")
    return parts.hostname or "127.0.0.1", parts.port or default_port


def _driver(module: str, extra: str) -> str:
    if importlib.util.find_spec(module) is not None:
        return f"driver {module} installed"
    return f"driver {module} not installed (pip install './packages/tensorsketch[{extra}]')"


def _knock(host: str, port: int, send: bytes, timeout: float) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.settimeout(timeout)
        conn.sendall(send)
        return conn.recv(64)


def probe_postgres(dsn: str = POSTGRES_DEFAULT, *, timeout: float = 1.0) -> Probe:
    """Ask ``dsn``'s host and port for TLS the way a PostgreSQL client starts (an
    ``SSLRequest``): a PostgreSQL server answers ``S`` or ``N``."""
    host, port = _host_port(dsn, 5432)
    address = f"{host}:{port}"
    driver = _driver("psycopg", "postgres")
    try:
        answer = _knock(host, port, struct.pack("!ii", 8, 80877103), timeout)
    except OSError as exc:
        return Probe("postgresql", address, False, f"no answer ({exc}); {driver}")
    if answer[:1] in (b"S", b"N"):
        return Probe("postgresql", address, True, f"a PostgreSQL server answered; {driver}")
    return Probe(
        "postgresql", address, False, f"something answered, not PostgreSQL ({answer!r:.40})"
    )


def probe_redis(url: str = REDIS_DEFAULT, *, timeout: float = 1.0) -> Probe:
    """Send ``PING``: Redis answers ``+PONG`` (or an error such as ``-NOAUTH`` when it wants a
    password, which still proves it is there)."""
    host, port = _host_port(url, 6379)
    address = f"{host}:{port}"
    driver = _driver("redis", "redis")
    try:
        answer = _knock(host, port, b"PING\r\n", timeout)
    except OSError as exc:
        return Probe("redis", address, False, f"no answer ({exc}); {driver}")
    if answer.startswith(b"+PONG"):
        return Probe("redis", address, True, f"a Redis server answered PONG; {driver}")
    if answer.startswith(b"-"):
        said = answer.decode("utf-8", "replace").strip()
        return Probe("redis", address, True, f"a Redis server answered {said!r}; {driver}")
    return Probe("redis", address, False, f"something answered, not Redis ({answer!r:.40})")


@dataclass(slots=True)
class Report:
    """What ``tensorsketch doctor`` found."""

    distributions: list[Installed]
    problems: list[str]
    services: list[Probe] = field(default_factory=list)
    browser: str | None = None  # the browser's path, or None
    browser_hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "distributions": [asdict(d) for d in self.distributions],
            "problems": list(self.problems),
            "services": [asdict(s) for s in self.services],
            "browser": self.browser,
            "browser_hint": self.browser_hint,
        }

    def render(self) -> str:
        lines = ["TensorSketch distributions:"]
        for d in self.distributions:
            where = d.source or f"a package index ({d.location})"
            mark = "" if d.ours or not d.first_party else "  NOT TENSORSKETCH"
            lines.append(f"  {d.name:<24} {d.version:<10} {d.origin:<9} {where}{mark}")
        if not self.distributions:
            lines.append("  (none)")
        lines.append("Services:")
        for probe in self.services:
            state = "reachable" if probe.reachable else "not reachable"
            lines.append(f"  {probe.service:<11} {probe.address:<21} {state}: {probe.detail}")
        lines.append("Browser:")
        lines.append(f"  {self.browser}" if self.browser else f"  none: {self.browser_hint}")
        if self.problems:
            lines.append("Problems:")
            lines.extend(f"  - {problem}" for problem in self.problems)
        else:
            lines.append("No problems found.")
        return "\n".join(lines)


def check(
    *,
    postgres: str = POSTGRES_DEFAULT,
    redis: str = REDIS_DEFAULT,
    timeout: float = 1.0,
    dists: Iterable[md.Distribution] | None = None,
    browser: Path = CHROMIUM,
) -> Report:
    """Everything ``tensorsketch doctor`` prints."""
    items = installed(dists)
    found = browser if browser.is_file() else None
    return Report(
        distributions=items,
        problems=diagnose(items),
        services=[probe_postgres(postgres, timeout=timeout), probe_redis(redis, timeout=timeout)],
        browser=str(found) if found else None,
        browser_hint=""
        if found
        else f"no {browser}: the Studio and the HTML report's browser tests drive it "
        "(apt-get install chromium)",
    )


def _address(text: str) -> str:
    """An ``argparse`` ``type=`` for ``--postgres`` / ``--redis``: a URL whose host and port
    can be read (a bad one is a usage error, not a traceback)."""
    try:
        _host_port(text, 0)
    except ValueError as exc:
        msg = f"is not a server's address ({exc}): {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    return text


def configure_cli(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--postgres",
        default=POSTGRES_DEFAULT,
        type=_address,
        metavar="DSN",
        help=f"the PostgreSQL server to knock on (default {POSTGRES_DEFAULT})",
    )
    parser.add_argument(
        "--redis",
        default=REDIS_DEFAULT,
        type=_address,
        metavar="URL",
        help=f"the Redis server to knock on (default {REDIS_DEFAULT})",
    )
    parser.add_argument(
        "--timeout", type=seconds, default=1.0, help="seconds to wait for each service (1.0)"
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run_cli(args: argparse.Namespace) -> int:
    """Print the report; exit 1 when something is wrong with the installed distributions."""
    report = check(postgres=args.postgres, redis=args.redis, timeout=args.timeout)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.render())
    return 1 if report.problems else 0
