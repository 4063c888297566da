"""What every part of the store shares."""

from __future__ import annotations

from typing import Any

Document = dict[str, Any]
