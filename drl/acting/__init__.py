"""The worker's and the evaluator's library: what happens between an environment, an actor and the wire.

``entries`` turns stepped transitions into wire entries (one buffer, filled in place), ``nstep`` folds them before
they are sent (DQN's n-step returns), ``evaluation`` runs deterministic episodes of a published policy.
"""
