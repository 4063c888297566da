"""The Python examples of the docs run as written, each page's blocks in order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize(
    "page",
    [
        "api.md",
        "retry-policies.md",
        "schedulers.md",
        "groups.md",
        "batches.md",
        "deduplication.md",
        "commands.md",
        "manual.md",
        "events.md",
        "stopping.md",
        "workflows.md",
    ],
)
def test_the_examples_of_a_page_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no Python example"
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    for block in blocks:
        exec(compile(block, f"{DOCS / page}", "exec"), namespace)


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize(
    "page", [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_of_a_page_leads_to_a_file(page: Path) -> None:
    targets = [t for t in LINK.findall(page.read_text()) if "://" not in t]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"
