"""`trainforge doctor`: check that this machine can train, and say how to fix what is wrong.

`main()` gathers the machine's facts (`doctor.facts`), resolves the run config the way
`trainforge train` would (profile: auto picks from the same detection), runs every check
(`doctor.checks`) and prints a table: status, check, finding, and the fix under each warning
or problem. A warning or a problem is a finding: each also goes to stderr as one line with
its fix, and the exit code is 1. Rows that are `ok`, `info` or `skip` are not findings, so a
machine with nothing to fix exits 0 (a laptop without a GPU included: "no NVIDIA GPU" is
`info`). A bad command line exits 2 as usual.

A package of its own above `config` and `models` (it loads a run config and builds the
model on the meta device), so that `hardware` stays below `config`.

Nothing here imports torch at module level: the torch checks import it lazily and report a
missing or broken PyTorch as a finding.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from trainforge.doctor.checks import diagnose
from trainforge.doctor.facts import Facts, gather_facts, load_doctor_fixture
from trainforge.doctor.finding import FINDINGS, Context, Finding
from trainforge.errors import UserError
from trainforge.hardware.platform import Platform

__all__ = ["Context", "Finding", "diagnose", "load_config", "main", "render", "run"]


def load_config(
    path: Path | None, platform: Platform, profile: str | None, overrides: Sequence[str]
) -> tuple[object | None, str | None]:
    """(RunConfig, None), or (None, the error as one line) when the config does not load."""
    from trainforge.config import ConfigError, load
    from trainforge.hardware.select import pick_profile

    try:
        resolved = load(
            path,
            profile=profile,
            overrides=list(overrides),
            pick_auto_profile=lambda: pick_profile(platform),
        )
    except ConfigError as err:
        return None, "; ".join(err.lines)
    except UserError as err:
        return None, err.line()
    return resolved.config, None


def main(
    config_path: Path | None = None,
    *,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    fixture: Path | None = None,
) -> int:
    """Check this machine (or the recorded one in `fixture`) for a run config; the exit code."""
    from trainforge.hardware.detect import detect

    facts: Facts | None = load_doctor_fixture(fixture) if fixture is not None else None
    platform = facts.platform if facts is not None else detect()
    config, error = load_config(config_path, platform, profile, overrides)
    if facts is None:
        output_dir = Path(config.output.dir) if config is not None else Path("runs")
        facts = gather_facts(output_dir, platform=platform)
    return run(Context(facts=facts, config=config, config_error=error, config_path=config_path))


def render(findings: Sequence[Finding], headline: str) -> tuple[list[str], list[str]]:
    """(table lines for stdout, one line per finding for stderr, problems first)."""
    width = max(len(f.check) for f in findings)
    lines = [headline, f"{'status':<8} {'check':<{width}}  finding"]
    for f in findings:
        label = f.status.upper() if f.status == "problem" else f.status
        lines.append(f"{label:<8} {f.check:<{width}}  {f.detail}")
        if f.fix and f.status in FINDINGS:
            lines.append(f"{'':<8} {'':<{width}}  fix: {f.fix}")
    problems = [f for f in findings if f.status == "problem"]
    warnings = [f for f in findings if f.status == "warn"]
    lines.append(f"{_plural(len(problems), 'problem')}, {_plural(len(warnings), 'warning')}")
    errors = [f"problem: {f.check}: {f.detail}. Fix: {f.fix}" for f in problems]
    errors += [f"warning: {f.check}: {f.detail}. Fix: {f.fix}" for f in warnings]
    return lines, errors


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def run(ctx: Context) -> int:
    """Print the report; 1 when any check found a problem or a warning, else 0."""
    headline = "trainforge doctor: " + ctx.facts.platform.describe()[0].removeprefix("platform: ")
    out, err = render(diagnose(ctx), headline)
    print("\n".join(out))
    if err:
        print("\n".join(err), file=sys.stderr)
        return 1
    return 0
