"""Protobuf modules generated from proto/drl/v1 by scripts/gen_proto.py (committed, checked current by a test)."""

from drl._proto.drl.v1 import evaluation_pb2, experience_pb2, policy_pb2

__all__ = ["evaluation_pb2", "experience_pb2", "policy_pb2"]
