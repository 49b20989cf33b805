"""Extra conformance scenarios (tests/conformance/extra/): combinations the shared cases leave out.

Every expectation in these files was derived by hand from ../shared/conformance/FORMAT.md (reasoning in
each file's comments), never copied from a runner's output, so a failure here means the runner and the
contract disagree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.replaying import assert_replays_exactly

EXTRA_DIR = Path(__file__).parent / "extra"
EXTRA = sorted(EXTRA_DIR.glob("*.yaml"))

def test_extra_cases_are_present():
    assert len(EXTRA) >= 15


def test_extra_cases_are_described_and_uniquely_named():
    import yaml

    names = []
    for path in EXTRA:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert doc.get("description"), f"{path.name}: no description"
        assert doc.get("expect"), f"{path.name}: no expected panes"
        names.append(doc.get("name"))
    assert len(names) == len(set(names)), "scenario names must be unique"


@pytest.mark.parametrize("path", EXTRA, ids=[p.stem for p in EXTRA])
def test_extra_case_replays_exactly(path: Path):
    assert_replays_exactly(path)
