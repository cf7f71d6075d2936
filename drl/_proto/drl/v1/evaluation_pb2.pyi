from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class EvaluationResult(_message.Message):
    __slots__ = ("run", "version", "env_steps", "updates", "episodes", "mean_return", "std_return", "returns", "wall_seconds", "created_at")
    RUN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    MEAN_RETURN_FIELD_NUMBER: _ClassVar[int]
    STD_RETURN_FIELD_NUMBER: _ClassVar[int]
    RETURNS_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    run: str
    version: int
    env_steps: int
    updates: int
    episodes: int
    mean_return: float
    std_return: float
    returns: _containers.RepeatedScalarFieldContainer[float]
    wall_seconds: float
    created_at: float
    def __init__(self, run: _Optional[str] = ..., version: _Optional[int] = ..., env_steps: _Optional[int] = ..., updates: _Optional[int] = ..., episodes: _Optional[int] = ..., mean_return: _Optional[float] = ..., std_return: _Optional[float] = ..., returns: _Optional[_Iterable[float]] = ..., wall_seconds: _Optional[float] = ..., created_at: _Optional[float] = ...) -> None: ...
