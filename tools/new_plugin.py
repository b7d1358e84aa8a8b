"""Start a TensorSketch plugin distribution from templates/plugin/.

    python tools/new_plugin.py NAME DEST

copies the template to DEST, replacing the placeholder ``yourname`` in paths and file contents:
``yourname-tensorsketch`` (the distribution), ``yourname_tensorsketch`` (the import package),
``Yourname`` (class names) and ``yourname`` (the name the provider registers under). The build
session and the integration tests use this same script, so what it writes is what is checked.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "plugin"
PLACEHOLDER = "yourname"
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
_SKIP = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".venv", "dist", "build"}


def substitutions(name: str) -> list[tuple[str, str]]:
    """The placeholder spellings and what replaces each, longest first."""
    if not _NAME.fullmatch(name):
        msg = (
            f"plugin name {name!r} is not a lowercase name like 'acme' or 'acme-cloud'; "
            "use letters, digits and single dashes, starting with a letter."
        )
        raise ValueError(msg)
    module = name.replace("-", "_")
    camel = "".join(part.capitalize() for part in name.split("-"))
    return [
        (f"{PLACEHOLDER}_tensorsketch", f"{module}_tensorsketch"),
        (PLACEHOLDER.capitalize(), camel),
        (PLACEHOLDER, name),
    ]


def _fill(text: str, subs: list[tuple[str, str]]) -> str:
    for old, new in subs:
        text = text.replace(old, new)
    return text


def render(name: str, dest: Path) -> Path:
    """Write the template to ``dest`` (which must not exist yet) with ``name`` filled in."""
    subs = substitutions(name)
    if dest.exists():
        msg = f"{dest} already exists; choose a new folder for the plugin."
        raise FileExistsError(msg)
    for source in sorted(TEMPLATE.rglob("*")):
        rel = source.relative_to(TEMPLATE)
        if _SKIP.intersection(rel.parts) or source.is_dir():
            continue
        target = dest / _fill(str(rel), subs)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix in {".py", ".toml", ".md", ".txt", ".cfg"}:
            target.write_text(_fill(source.read_text(encoding="utf-8"), subs), encoding="utf-8")
        else:
            shutil.copyfile(source, target)
    leftover = [
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if PLACEHOLDER in str(p.relative_to(dest)).lower()
        or (p.is_file() and PLACEHOLDER in p.read_bytes().decode("utf-8", "replace").lower())
    ]
    if leftover:
        msg = f"the placeholder {PLACEHOLDER!r} is still in {leftover} after filling in {name!r}"
        raise RuntimeError(msg)
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: python tools/new_plugin.py NAME DEST", file=sys.stderr)
        return 2
    dest = render(argv[0], Path(argv[1]))
    print(f"wrote {dest} ({argv[0]}-tensorsketch); next: pip install -e '{dest}[test]'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
