from services.common import run_service
from services.rollout.worker import serve

run_service("rollout", serve)
