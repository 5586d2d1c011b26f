"""The one lookup of a run named in a URL (`web.lookup`): 400 before any path for a name that
is not one, 404 where no run is behind it, for plain runs and sweep trials alike; and every
web module takes it from there (no second copy with its own messages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import HTTPException

from trainforge.web.lookup import run_record, trial_record

WEB = Path(__file__).resolve().parents[2] / "src" / "trainforge" / "web"


class _State:
    def __init__(self, runs: dict):
        self.runs, self.asked = runs, []

    def get_run(self, run_id):
        self.asked.append(run_id)
        return self.runs.get(run_id)


@pytest.mark.parametrize(
    ("look", "args", "status", "detail"),
    [
        (run_record, ("../etc",), 400, "run id '../etc' is not a plain name"),
        (run_record, ("absent",), 404, "no run 'absent'"),
        (trial_record, ("s", "x"), 400, "'s/x' is not SWEEP/trial-NNN"),
        (trial_record, ("s", "trial-001"), 404, "no trial 's/trial-001'"),
    ],
)
def test_a_bad_name_is_400_before_any_lookup_and_a_missing_run_404(look, args, status, detail):
    state = _State({})
    with pytest.raises(HTTPException) as err:
        look(state, *args)
    assert (err.value.status_code, err.value.detail) == (status, detail)
    assert state.asked == ([] if status == 400 else ["/".join(args)])


def test_a_run_there_is_returned():
    state = _State({"r1": "record", "s/trial-002": "trial"})
    assert run_record(state, "r1") == "record"
    assert trial_record(state, "s", "trial-002") == "trial"


def test_no_web_module_raises_its_own_run_lookup_errors():
    """A second `no run ...` / `not a plain name` pair beside the lookup's would drift from
    it; the Compare page's folder-path check is its own rule (runs by folder path)."""
    own = ('HTTPException(404, f"no run ', 'HTTPException(404, f"no trial ',
           "run id {shown", "is not SWEEP/trial-NNN")  # fmt: skip
    for path in sorted(WEB.glob("*.py")):
        if path.name in {"lookup.py", "compare.py"}:
            continue
        text = path.read_text(encoding="utf-8")
        found = [o for o in own if o in text]
        assert not found, (path.name, found)
