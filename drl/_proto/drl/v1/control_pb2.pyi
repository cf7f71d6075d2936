from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServiceStatus(_message.Message):
    __slots__ = ("role", "id", "run", "policy_version", "env_steps", "updates", "transitions_per_s", "backlog", "restarts", "last_error", "state", "uptime_s", "fields")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    role: str
    id: str
    run: str
    policy_version: int
    env_steps: int
    updates: int
    transitions_per_s: float
    backlog: int
    restarts: int
    last_error: str
    state: str
    uptime_s: float
    fields: _containers.ScalarMap[str, str]
    def __init__(self, role: _Optional[str] = ..., id: _Optional[str] = ..., run: _Optional[str] = ..., policy_version: _Optional[int] = ..., env_steps: _Optional[int] = ..., updates: _Optional[int] = ..., transitions_per_s: _Optional[float] = ..., backlog: _Optional[int] = ..., restarts: _Optional[int] = ..., last_error: _Optional[str] = ..., state: _Optional[str] = ..., uptime_s: _Optional[float] = ..., fields: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StopReply(_message.Message):
    __slots__ = ("accepted", "state")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    state: str
    def __init__(self, accepted: _Optional[bool] = ..., state: _Optional[str] = ...) -> None: ...
