"""User-facing errors: one clear line that names the problem and the fix.

The CLI turns a `UserError` into that line on stderr and exit code 2, with no traceback.
Internal invariants use `assert`; anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad config, missing file, unknown name).

    `message` says what is wrong and names the field or path and the bad value;
    `fix` says what to do about it. Both end up on one line.
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        text = self.message.rstrip(". ")
        return f"{text}. {self.fix}" if self.fix else text
