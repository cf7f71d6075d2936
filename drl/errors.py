"""Errors that carry a message meant for the user.

Services and the CLI turn a ``UserError`` into one line on stderr and exit code ``EXIT_USAGE``; anything else
is a bug and keeps its traceback.
"""

EXIT_USAGE = 2
"""The exit code of bad input, everywhere: the CLI, every service, the scaler. The local orchestrator does not
restart a process that exited with it (the same input would be refused again)."""


class UserError(Exception):
    """Bad input: a wrong option, an unknown environment, an unreachable server."""


class ConfigError(UserError):
    """A configuration value or file that cannot be accepted."""
