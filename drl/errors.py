"""Errors that carry a message meant for the user.

Services and the CLI turn a ``UserError`` into one line on stderr and exit code 2; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """Bad input: a wrong option, an unknown environment, an unreachable server."""


class ConfigError(UserError):
    """A configuration value or file that cannot be accepted."""
