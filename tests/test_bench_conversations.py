"""``ttsfarm bench conversations`` end to end, small: a private farm, callers taking turns, the report it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import stage_parser
from bench.conversations import main

pytestmark = pytest.mark.slow


def test_callers_taking_turns_are_measured_and_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = stage_parser("conversations").parse_args(["--callers", "2", "--turns", "1", "--burst", "2",
                                                     "--out", str(tmp_path)])
    assert main(args) == 0
    result = json.loads((tmp_path / "conversations.json").read_text())
    assert [r["callers"] for r in result["runs"]] == [2]
    for run in result["runs"]:
        assert run["turns"] == run["callers"] == len(run["rows"]) == len({r["caller"] for r in run["rows"]})
        assert all(r["audio_s"] > 3.0 and r["first_audio_ms"] > 0 for r in run["rows"])
    assert result["capacity"] in (0, 2) and len(result["burst"]["rows"]) == 2
    assert "capacity:" in capsys.readouterr().out
