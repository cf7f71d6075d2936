"""Twin delayed deep deterministic policy gradient (TD3) for continuous (Box) actions.

The learner and actor (and torch with them) load on first use, so that reading a configuration, as the
command line does, stays light.
"""

from drl.algorithms import lazy_exports
from drl.algorithms.td3.config import TD3Config

__all__ = ["TD3Actor", "TD3Config", "TD3Learner"]
__getattr__ = lazy_exports(__name__, {"TD3Actor": "actor", "TD3Learner": "learner"})
