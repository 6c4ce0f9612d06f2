"""The one exception type a user can cause.

Library code raises `UserError` with one sentence that names the file, line, column or flag and says
how to fix it; the CLI turns it into that sentence on stderr and exit code 2 (no traceback).
"""


class UserError(Exception):
    """A problem with the user's input (file, flag, model) that they can fix."""
