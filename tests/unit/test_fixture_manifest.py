"""Every recorded fixture is indexed in its MANIFEST with provenance and features."""

from __future__ import annotations

from pathlib import Path

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "recorded"
COLUMNS = [
    "File",
    "Provider",
    "Endpoint family",
    "API revision",
    "Model",
    "Capture date",
    "Features exercised",
]


def index_rows() -> dict[str, list[str]]:
    text = (RECORDED / "MANIFEST.md").read_text()
    section = text.split("## Fixture index", 1)[1]
    rows: dict[str, list[str]] = {}
    header_seen = False
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells == COLUMNS:
            header_seen = True
            continue
        if set(cells[0]) <= {"-"}:
            continue
        rows[cells[0].strip("`")] = cells
    assert header_seen, "the fixture index must have the documented columns"
    return rows


def test_every_fixture_has_a_complete_index_row() -> None:
    files = sorted(str(p.relative_to(RECORDED)) for p in RECORDED.rglob("*") if p.is_file())
    files.remove("MANIFEST.md")
    rows = index_rows()
    assert sorted(rows) == files
    for name, cells in rows.items():
        assert len(cells) == len(COLUMNS), name
        assert all(cells), f"{name} has an empty cell"
