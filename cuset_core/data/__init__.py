"""Datasets: formats, loading, line-numbered validation, group splits and prompt styles."""

from cuset_core.data.encode import IGNORE_INDEX, EncodedRecord, encode_record
from cuset_core.data.load import (
    DataFileError,
    DataFileMissingError,
    LoadOptions,
    LoadResult,
    invalid_json_message,
    load_records,
)
from cuset_core.data.records import Message, Record
from cuset_core.data.split import group_of, split_by_group
from cuset_core.data.validate import DataIssue, ErrorCode

__all__ = [
    "IGNORE_INDEX",
    "DataFileError",
    "DataFileMissingError",
    "DataIssue",
    "EncodedRecord",
    "ErrorCode",
    "LoadOptions",
    "LoadResult",
    "Message",
    "Record",
    "encode_record",
    "group_of",
    "invalid_json_message",
    "load_records",
    "split_by_group",
]
