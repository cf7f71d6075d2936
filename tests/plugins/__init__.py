"""Algorithms and environments registered from outside drl, as a user's plugin would be (``DRL_PLUGINS``)."""
