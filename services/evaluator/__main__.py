from services.common import run_service
from services.evaluator.evaluator import serve

run_service("evaluator", serve)
