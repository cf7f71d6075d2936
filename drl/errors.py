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


EXIT_SUPERSEDED = 4
"""The exit code of a process that another process with its identity superseded (a rollout worker, a learner,
the trainer or the evaluator started again beside it: a replacement pod, an operator's second start; see
docs/reliability.md, "One identity, one writer"): the memory server refused its writes, so it stopped without
counting anything twice. Nobody restarts it: the identity lives on in the process that superseded it."""


EXIT_INTERRUPTED = 143
"""The exit code (128 + SIGTERM, as a shell reports a process SIGTERM ended) of a service that SIGTERM stopped
before its part of the run was done: a pod deleted, evicted or drained while the run goes on. It handed in or
saved what it had (a rollout worker its transitions, the trainer its checkpoint) and did not record its part as
finished, so that its Job starts a replacement (a pod that exits 0 counts as a completion) and the local
orchestrator restarts it; the replacement continues where it stopped."""


class Superseded(Exception):
    """This process's identity was taken over by another process: the memory server refused a write carrying this
    process's (older) fencing epoch. The service stops at once, says so in one line and exits with
    ``EXIT_SUPERSEDED``."""
