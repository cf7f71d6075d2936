from services.common import run_service
from services.trainer.trainer import serve

run_service("trainer", serve)
