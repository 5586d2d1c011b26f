"""The one lookup of a run named in a URL (`web.lookup`): 400 before any path for a name that
is not one, 404 where no run is behind it, for plain runs and sweep trials alike, and no web
module with its own copy; and the one list of path-carrying settings (`web.paths`) that the
dialog's overrides box reads."""

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


def test_the_path_settings_list_says_which_the_overrides_box_may_set():
    """One list of path-carrying settings for the path rule and the dialog: the dialog's own
    ones are refused in the overrides box, the user's ones (extensions, init_from, the W&B
    folder) are path-checked there instead."""
    from trainforge.web.dialog import RESERVED_PREFIXES
    from trainforge.web.paths import PATH_SETTINGS

    assert {"model.init_from", "extensions"} <= {k for k, o in PATH_SETTINGS.items() if o == "user"}
    for key, owner in PATH_SETTINGS.items():
        assert owner in {"user", "dialog"}
        assert key.startswith(RESERVED_PREFIXES) == (owner == "dialog"), key
