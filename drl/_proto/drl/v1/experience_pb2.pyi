from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArrayInfo(_message.Message):
    __slots__ = ("name", "dtype", "shape", "offset", "nbytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    nbytes: int
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ...) -> None: ...

class BatchHeader(_message.Message):
    __slots__ = ("format_version", "run", "worker_id", "seq", "policy_version", "count", "arrays", "iteration_end", "final", "produced_total", "compression", "raw_nbytes")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_END_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    PRODUCED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    RAW_NBYTES_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    run: str
    worker_id: str
    seq: int
    policy_version: int
    count: int
    arrays: _containers.RepeatedCompositeFieldContainer[ArrayInfo]
    iteration_end: bool
    final: bool
    produced_total: int
    compression: str
    raw_nbytes: int
    def __init__(self, format_version: _Optional[int] = ..., run: _Optional[str] = ..., worker_id: _Optional[str] = ..., seq: _Optional[int] = ..., policy_version: _Optional[int] = ..., count: _Optional[int] = ..., arrays: _Optional[_Iterable[_Union[ArrayInfo, _Mapping]]] = ..., iteration_end: _Optional[bool] = ..., final: _Optional[bool] = ..., produced_total: _Optional[int] = ..., compression: _Optional[str] = ..., raw_nbytes: _Optional[int] = ...) -> None: ...
