from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredObject(_message.Message):
    __slots__ = ("name", "sha256", "size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    sha256: str
    size: int
    def __init__(self, name: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class PolicyManifest(_message.Message):
    __slots__ = ("run", "version", "algorithm", "env_steps", "updates", "created_at", "objects", "observation_space", "action_space")
    RUN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_SPACE_FIELD_NUMBER: _ClassVar[int]
    ACTION_SPACE_FIELD_NUMBER: _ClassVar[int]
    run: str
    version: int
    algorithm: str
    env_steps: int
    updates: int
    created_at: float
    objects: _containers.RepeatedCompositeFieldContainer[StoredObject]
    observation_space: str
    action_space: str
    def __init__(self, run: _Optional[str] = ..., version: _Optional[int] = ..., algorithm: _Optional[str] = ..., env_steps: _Optional[int] = ..., updates: _Optional[int] = ..., created_at: _Optional[float] = ..., objects: _Optional[_Iterable[_Union[StoredObject, _Mapping]]] = ..., observation_space: _Optional[str] = ..., action_space: _Optional[str] = ...) -> None: ...

class CheckpointManifest(_message.Message):
    __slots__ = ("run", "sequence", "policy_version", "env_steps", "updates", "created_at", "objects", "meta_json", "algorithm")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENV_STEPS_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    META_JSON_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    run: str
    sequence: int
    policy_version: int
    env_steps: int
    updates: int
    created_at: float
    objects: _containers.RepeatedCompositeFieldContainer[StoredObject]
    meta_json: str
    algorithm: str
    def __init__(self, run: _Optional[str] = ..., sequence: _Optional[int] = ..., policy_version: _Optional[int] = ..., env_steps: _Optional[int] = ..., updates: _Optional[int] = ..., created_at: _Optional[float] = ..., objects: _Optional[_Iterable[_Union[StoredObject, _Mapping]]] = ..., meta_json: _Optional[str] = ..., algorithm: _Optional[str] = ...) -> None: ...
