"""Asynchronous actor-critic with V-trace corrections (IMPALA, and APPO's clipped surrogate), on-policy data
collected ASYNC: each segment consumed once, in order of arrival.

The learner and actor (and torch with them) load on first use, so that reading a configuration, as the
command line does, stays light.
"""

from drl.algorithms import lazy_exports
from drl.algorithms.appo.config import APPOConfig

__all__ = ["APPOActor", "APPOConfig", "APPOLearner", "vtrace"]
__getattr__ = lazy_exports(__name__, {"APPOActor": "actor", "APPOLearner": "learner", "vtrace": "vtrace"})
