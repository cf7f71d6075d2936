import os

from services.common import run_service
from services.trainer.trainer import serve

run_service("learner" if os.environ.get("DRL_LEARNER_RANK", "0") not in ("", "0") else "trainer", serve)
