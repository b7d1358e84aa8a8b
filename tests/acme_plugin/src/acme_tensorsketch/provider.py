"""A provider that answers with a fixed prefix; importing it marks that it was loaded."""

from __future__ import annotations

import os
from typing import Any

LOADED_MARKER = "ACME_PROVIDER_IMPORTED"
os.environ[LOADED_MARKER] = "1"


class AcmeProvider:
    def __init__(self, model: str = "acme-1", **options: Any) -> None:
        self.model = model
        self.options = options
