"""Files API shapes: OpenAI's file object (plus our record counts), records and analysis."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonDict

from api.schemas.common import ListPage
from db.file_warnings import RecordWarning

UploadPurpose = Literal["fine-tune", "eval", "problems"]
# A tuning job's results (its adapter archive) are files too, written by the worker, never uploaded.
Purpose = Literal["fine-tune", "eval", "problems", "fine-tune-results"]

_FILE_ID = "file-3f2a9c0d1e2b4a5968778695"
_FILE_EXAMPLE: JsonDict = {
    "id": _FILE_ID,
    "object": "file",
    "bytes": 48213,
    "created_at": 1764439200,
    "filename": "kernels.jsonl",
    "purpose": "fine-tune",
    "status": "processed",
    "status_details": None,
    "format": "jsonl",
    "records": 46,
    "total_rows": 46,
    "warnings": 2,
}


class FileUploadForm(BaseModel):
    """The multipart form of ``POST /v1/files`` (documented; the body is parsed as it streams)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"file": "(binary kernels.jsonl)", "purpose": "fine-tune"}]}
    )

    file: bytes = Field(
        description="JSONL (one record per line) or parquet (recognised by the PAR1 magic)",
        json_schema_extra={"format": "binary"},
    )
    purpose: UploadPurpose = Field(
        description="fine-tune: chat/prompt-completion/question-answer rows whose answer "
        "defines a __global__ kernel; eval (problems to measure a model on) and problems (a pool to sample "
        'and verify answers for, never an eval set): JSONL rows {"id", "problem"}, each problem a KernelBench '
        "one (class Model with forward, get_inputs(), get_init_inputs())"
    )


class FileObject(BaseModel):
    """An uploaded file (OpenAI's file object) with what validation found."""

    model_config = ConfigDict(json_schema_extra={"examples": [_FILE_EXAMPLE]})

    id: str
    object: Literal["file"] = "file"
    bytes: int = Field(description="size in bytes")
    created_at: int = Field(description="Unix seconds")
    filename: str
    purpose: Purpose
    status: Literal["processed"] = "processed"
    status_details: str | None = None
    format: Literal["jsonl", "parquet", "tar"] = Field(
        description="tar: a job's result, its model files (a LoRA adapter: adapter_config.json and "
        "adapter_model.safetensors) in one folder named after the job"
    )
    records: int = Field(description="records (or eval problems) the file holds; 0 for a job's result")
    total_rows: int = Field(description="rows read")
    warnings: int = Field(description="warnings about kept records (e.g. no fenced code block)")


class FileList(ListPage[FileObject]):
    """A page of files, newest first."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "object": "list",
                    "data": [_FILE_EXAMPLE],
                    "has_more": False,
                    "first_id": _FILE_ID,
                    "last_id": _FILE_ID,
                }
            ]
        }
    )


class FileDeleted(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"id": _FILE_ID, "object": "file", "deleted": True}]})

    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


_RECORD_EXAMPLE: JsonDict = {
    "index": 0,
    "line": 1,
    "prompt": "Write a CUDA kernel for: class Model(nn.Module): ...",
    "answer": "```python\nimport torch\nfrom torch.utils.cpp_extension import load_inline ...",
    "warnings": [],
}


class FileRecord(BaseModel):
    """One record of a file as the dashboard's table shows it (excerpts, not whole texts)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_RECORD_EXAMPLE]})

    index: int = Field(description="0-based position among the file's records")
    line: int = Field(description="1-based JSONL line or parquet row")
    prompt: str = Field(description="excerpt of the last user message (eval files: the problem code)")
    answer: str | None = Field(description="excerpt of the answer; null for eval problems")
    warnings: list[RecordWarning]


class FileRecordPage(BaseModel):
    """``limit`` records from ``offset``; ``total`` is the file's record count."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "object": "list",
                    "file_id": _FILE_ID,
                    "offset": 0,
                    "limit": 1,
                    "total": 46,
                    "data": [_RECORD_EXAMPLE],
                }
            ]
        }
    )

    object: Literal["list"] = "list"
    file_id: str
    offset: int
    limit: int
    total: int
    data: list[FileRecord]


_SPAN: JsonDict = {"start": 0, "end": 10, "category": "qualifier", "text": "__global__"}
_REGION: JsonDict = {
    "id": 0,
    "start": 0,
    "end": 27,
    "kind": "kernel_signature",
    "category": "qualifier",
    "span_indices": [0],
}
_ANALYSIS: JsonDict = {
    "schema": "cuset.analysis/1",
    "language": "cu",
    "cuda_chars": 51,
    "parse_coverage": 1.0,
    "spans": [_SPAN],
    "regions": [_REGION],
}


class AnalysisSpan(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_SPAN]})

    start: int = Field(description="answer character offset, inclusive")
    end: int = Field(description="answer character offset, exclusive")
    category: str
    text: str


class AnalysisRegion(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_REGION]})

    id: int
    start: int
    end: int
    kind: str = Field(description="statement, launch, declaration, kernel_signature, extension_call, ...")
    category: str
    span_indices: list[int]


class Analysis(BaseModel):
    """``cuset_core.analysis.analyze.analyze_answer(answer).to_json()`` (schema cuset.analysis/1)."""

    schema_: str = Field(alias="schema")
    language: str
    cuda_chars: int
    parse_coverage: float
    spans: list[AnalysisSpan]
    regions: list[AnalysisRegion]

    model_config = ConfigDict(
        populate_by_name=True, serialize_by_alias=True, json_schema_extra={"examples": [_ANALYSIS]}
    )


_TOKEN: JsonDict = {"start": 0, "end": 10, "p": 0.93}
_REGION_CONFIDENCE: JsonDict = {"index": 0, "mean_p": 0.41, "min_p": 0.08, "tokens": 6}
_CONFIDENCE: JsonDict = {
    "model": "smollm2-135m",
    "low_confidence_threshold": 0.5,
    "tokens": [_TOKEN],
    "regions": [_REGION_CONFIDENCE],
}


class TokenConfidence(BaseModel):
    """One answer token and the model's probability of it given everything before it."""

    model_config = ConfigDict(json_schema_extra={"examples": [_TOKEN]})

    start: int = Field(description="answer character offset, inclusive")
    end: int = Field(description="answer character offset, exclusive")
    p: float = Field(ge=0.0, le=1.0, description="probability of this (reference) token, 0..1")


class RegionConfidence(BaseModel):
    """How sure the model is of the sensitive tokens of one region."""

    model_config = ConfigDict(json_schema_extra={"examples": [_REGION_CONFIDENCE]})

    index: int = Field(description="the region's ``id`` in ``analysis.regions``")
    mean_p: float = Field(ge=0.0, le=1.0, description="mean p of the region's sensitive tokens")
    min_p: float = Field(ge=0.0, le=1.0, description="lowest p among them")
    tokens: int = Field(description="sensitive tokens of the region that were scored")


class AnswerConfidence(BaseModel):
    """Per-token confidence of ``model`` on the answer (the record's prompt rendered as in
    training), and per-region summaries; regions with ``mean_p`` below
    ``low_confidence_threshold`` are the ones CuSeT up-weights."""

    model_config = ConfigDict(json_schema_extra={"examples": [_CONFIDENCE]})

    model: str
    low_confidence_threshold: float = Field(description="a region with mean_p below it is low-confidence")
    tokens: list[TokenConfidence] = Field(
        description="answer tokens in order; long answers stop at the confidence report's token limit"
    )
    regions: list[RegionConfidence] = Field(description="regions with at least one scored token")


class RecordAnalysis(BaseModel):
    """The sensitive spans and regions of one record's answer, in answer character offsets;
    with ``?model=``, also the model's confidence in each answer token."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "object": "file.record.analysis",
                    "file_id": _FILE_ID,
                    "index": 0,
                    "line": 1,
                    "answer": "__global__ void k(float* x) { x[threadIdx.x] = 0; }",
                    "analysis": _ANALYSIS,
                }
            ]
        }
    )

    object: Literal["file.record.analysis"] = "file.record.analysis"
    file_id: str
    index: int
    line: int
    answer: str
    analysis: Analysis
    confidence: AnswerConfidence | None = Field(default=None, description="only when ``model`` is given")


class FileFit(BaseModel):
    """How many of a training file's records a job on ``model`` would train on at ``max_seq_len``
    tokens (prompt and answer, rendered in ``prompt_style``): the rest are left out as
    over_token_limit when the job starts, as its events then say."""

    file_id: str
    model: str
    max_seq_len: int
    prompt_style: str
    records: int = Field(description="records the file's validation kept")
    fit: int = Field(description="of those, the records at or under max_seq_len tokens")
    over_lines: list[int] = Field(description="lines of the records over it (the first 100)")
