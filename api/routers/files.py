"""``/v1/files``: OpenAI-compatible uploads (fine-tune and eval datasets), plus the records
table and per-record sensitivity analysis the dashboard shows.

An upload is validated completely before it is kept: a file with any bad row is rejected with
every problem's line, field and code, and leaves neither a row nor a file behind.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.deps import OwnerDep, SessionDep, SettingsDep
from api.errors import APIError, ErrorResponse
from api.file_contents import FINE_TUNE, PURPOSES, TokenLimit, check_file, excerpt, over_limit_note, read_records
from api.queries import keyset_rows, list_page, owned_or_404
from api.routers.models import model_spec
from api.schemas.files import (
    AnswerConfidence,
    FileDeleted,
    FileFit,
    FileList,
    FileObject,
    FileRecord,
    FileRecordPage,
    FileUploadForm,
    Purpose,
    RecordAnalysis,
    RecordWarning,
)
from api.storage import Upload, accept, receive_upload, remove_quietly, sanitize_filename, stored_path
from api.streaming import wait_final
from cuset_core.analysis.analyze import analyze_answer
from cuset_core.evaluation.confidence_settings import ReportSettings
from cuset_core.training.config import Hyperparameters
from db.confidence_scores import AnswerScores, ConfidenceRequest
from db.errors import ErrorCode
from db.ids import new_id
from db.models import RESULTS_PURPOSE, Eval, File, Generation, Job
from db.settings import Settings
from db.statuses import GenerationKind, GenerationStatus
from service.dispatch import send_confidence

router = APIRouter(tags=["files"])

# A region whose sensitive tokens have a mean p below this is "unsure" (the confidence report's own cut).
LOW_CONFIDENCE: float = ReportSettings.model_fields["low"].default
_MEDIA_TYPES = {"jsonl": "application/jsonl", "parquet": "application/vnd.apache.parquet", "tar": "application/x-tar"}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": FileUploadForm.model_json_schema(),
                "example": {"purpose": "fine-tune", "file": "(binary kernels.jsonl)"},
            }
        },
    }
}


def to_object(row: File) -> FileObject:
    """The API shape of a file row."""
    return FileObject(
        id=row.id,
        bytes=row.bytes,
        created_at=int(row.created_at),
        filename=row.filename,
        purpose=row.purpose,
        format=row.format,
        records=row.records,
        total_rows=row.total_rows,
        warnings=len(row.warnings),
        status_details=over_limit_note(row.warnings, row.records),
    )


def owned_file(session: Session, owner: str, file_id: str, param: str | None = None) -> File:
    """The owner's file ``file_id``; 404 when unknown or someone else's."""
    return owned_or_404(session, File, file_id, owner, "file", param=param)


@router.post(
    "/files",
    response_model=FileObject,
    summary="Upload a dataset file",
    openapi_extra=_UPLOAD_BODY,
    responses={
        400: {"model": ErrorResponse, "description": "a bad form or a file with invalid rows (code invalid_file)"},
        413: {"model": ErrorResponse, "description": "larger than max_upload_mb (code file_too_large)"},
    },
)
async def create_file(request: Request, settings: SettingsDep, session: SessionDep, owner: OwnerDep) -> FileObject:
    """Stream the ``file`` part to disk, validate every row for ``purpose`` and keep it.

    JSONL or parquet (recognised by content). Any row with an error rejects the whole file;
    the message lists the first problems as ``line N, field: code — message``.
    """
    upload = await receive_upload(
        request.headers.get("content-type"),
        request.headers.get("content-length"),
        request.stream(),
        settings.artifacts,
        settings.max_upload_mb,
    )
    try:
        purpose = upload.fields.get("purpose")
        if purpose is None:
            raise APIError(
                400,
                "Missing required form field 'purpose' (fine-tune, eval or problems).",
                code=ErrorCode.MISSING_REQUIRED_PARAMETER,
                param="purpose",
            )
        if purpose not in PURPOSES:
            raise APIError(
                400,
                f"purpose {purpose!r} is not one of {', '.join(PURPOSES)}.",
                code=ErrorCode.INVALID_VALUE,
                param="purpose",
            )
        if upload.path is None:
            raise APIError(
                400, "Missing required form part 'file'.", code=ErrorCode.MISSING_REQUIRED_PARAMETER, param="file"
            )
        return await run_in_threadpool(_store, upload, purpose, settings, session, owner)
    finally:
        remove_quietly(upload.path)  # already moved when accepted; removed on every other path


def _default_limit(settings: Settings, purpose: str) -> TokenLimit | None:
    """What a fine-tune upload's records are counted against: the default ``max_seq_len`` with
    the tokenizer of the first base model (loaded once and kept, as the context check keeps it);
    None (no count) for other purposes or when that tokenizer cannot be read here."""
    from api.context import model_context

    if purpose != FINE_TUNE or not settings.base_models:
        return None
    model, spec = next(iter(settings.base_models.items()))
    context = model_context(spec)
    if context is None:
        return None
    default = Hyperparameters.model_fields["max_seq_len"].default
    return TokenLimit(context.tokenizer, default, model, lock=context.lock)


def _store(upload: Upload, purpose: str, settings: Settings, session: Session, owner: str) -> FileObject:
    """Validate the temp file, move it into place and insert its row (or leave nothing)."""
    if upload.path is None:
        raise APIError(400, "Upload the file in the part named 'file'.", code=ErrorCode.INVALID_REQUEST, param="file")
    checked = check_file(upload.path, purpose, settings.max_records_per_file, _default_limit(settings, purpose))
    file_id = new_id("file")
    relative = accept(upload.path, settings.artifacts, file_id, checked.format)
    try:
        row = File(
            id=file_id,
            owner=owner,
            filename=sanitize_filename(upload.filename),
            purpose=purpose,
            format=checked.format,
            bytes=upload.bytes,
            path=relative,
            records=checked.records,
            total_rows=checked.total_rows,
            warnings=checked.warnings,
        )
        session.add(row)
        session.commit()
    except BaseException:
        remove_quietly(stored_path(settings.artifacts, relative))
        raise
    return to_object(row)


@router.get("/files", response_model=FileList, summary="List files, newest first")
def list_files(
    session: SessionDep,
    owner: OwnerDep,
    purpose: Annotated[Purpose | None, Query(description="only files of this purpose")] = None,
    after: Annotated[str | None, Query(description="id of the last file of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Annotated[Literal["asc", "desc"], Query(description="by creation time")] = "desc",
) -> FileList:
    query = select(File).where(File.owner == owner)
    if purpose is not None:
        query = query.where(File.purpose == purpose)
    cursor = None
    if after is not None:
        anchor = owned_file(session, owner, after, param="after")
        cursor = (anchor.created_at, anchor.id)
    rows = keyset_rows(session, query, (File.created_at, File.id), cursor, limit, descending=order == "desc")
    return list_page(FileList, rows, limit, to_object)


@router.get("/files/{file_id}", response_model=FileObject, summary="Retrieve a file")
def retrieve_file(file_id: str, session: SessionDep, owner: OwnerDep) -> FileObject:
    return to_object(owned_file(session, owner, file_id, param="file_id"))


@router.delete(
    "/files/{file_id}",
    response_model=FileDeleted,
    summary="Delete a file",
    responses={409: {"model": ErrorResponse, "description": "a fine-tuning job or an eval uses it (code file_in_use)"}},
)
def delete_file(file_id: str, session: SessionDep, owner: OwnerDep, settings: SettingsDep) -> FileDeleted:
    """Remove the file's row and its stored content; refused while a job or eval references it."""
    row = owned_file(session, owner, file_id, param="file_id")
    user = session.scalar(
        select(Job.id)
        .where(or_(Job.training_file == file_id, Job.validation_file == file_id, Job.problems_file == file_id))
        .limit(1)
    ) or session.scalar(select(Eval.id).where(Eval.eval_file == file_id).limit(1))
    if user is not None:
        raise _in_use(file_id, user)
    relative = row.path
    if PurePosixPath(relative).parts[0] == "jobs":  # a job's result (its adapter, a self-training job's answers)
        _forget_result(session, row)
    session.delete(row)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()  # a job referencing it was created meanwhile (the foreign key says so)
        raise _in_use(file_id, "a fine-tuning job") from None
    remove_quietly(stored_path(settings.artifacts, relative))
    return FileDeleted(id=file_id)


def _forget_result(session: Session, row: File) -> None:
    """Take a deleted result file off its job's ``result_files`` (it lives in ``jobs/<job id>/``)."""
    job = session.get(Job, PurePosixPath(row.path).parts[1], with_for_update=True)
    if job is not None and row.id in (job.result_files or []):
        job.result_files = [file_id for file_id in job.result_files if file_id != row.id]


def _in_use(file_id: str, user: str) -> APIError:
    return APIError(
        409, f"File '{file_id}' is used by {user}; delete that first.", code=ErrorCode.FILE_IN_USE, param="file_id"
    )


@router.get(
    "/files/{file_id}/content",
    summary="Download a file's content",
    response_class=FileResponse,
    responses={
        200: {
            "content": {"application/jsonl": {}, "application/vnd.apache.parquet": {}, "application/x-tar": {}},
            "description": "the file as uploaded (or a job's result archive), streamed",
        }
    },
)
def file_content(file_id: str, session: SessionDep, owner: OwnerDep, settings: SettingsDep) -> FileResponse:
    row = owned_file(session, owner, file_id, param="file_id")
    path = stored_path(settings.artifacts, row.path)
    if not path.is_file():
        raise APIError(
            404,
            f"The content of file '{file_id}' is missing from storage.",
            code=ErrorCode.FILE_CONTENT_MISSING,
            param="file_id",
        )
    return FileResponse(
        path, media_type=_MEDIA_TYPES.get(row.format, "application/octet-stream"), filename=row.filename
    )


@router.get(
    "/files/{file_id}/fit",
    response_model=FileFit,
    summary="How many records a job on a model would train on at a token limit",
    responses={404: {"model": ErrorResponse, "description": "unknown file or model (param model)"}},
)
def file_fit(
    file_id: str,
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    model: Annotated[str, Query(min_length=1, max_length=255, description="a model a job may tune")],
    max_seq_len: Annotated[int, Query(ge=16, le=131_072)] = Hyperparameters.model_fields["max_seq_len"].default,
    prompt_style: Literal["kernelbench", "compact"] = "compact",
) -> FileFit:
    """A fine-tune file's records counted as a job's start counts them with the model's tokenizer:
    the file's validation cannot know a job's model and token limit, so its count may be higher."""
    from cuset_core.data import LoadOptions, load_records
    from cuset_core.data.validate import ErrorCode as DataCode
    from cuset_core.models import load_tokenizer

    row = owned_file(session, owner, file_id, param="file_id")
    if row.purpose != "fine-tune":
        raise APIError(
            400,
            f"File '{file_id}' has purpose '{row.purpose}'; only training files (fine-tune) are tuned on.",
            code=ErrorCode.INVALID_FILE_PURPOSE,
            param="file_id",
        )
    tokenizer = load_tokenizer(model_spec(session, settings, owner, model))
    options = LoadOptions(prompt_style=prompt_style, max_tokens=max_seq_len)
    loaded = load_records(stored_path(settings.artifacts, row.path), options, tokenizer)
    over = sorted(issue.line for issue in loaded.errors if issue.code == DataCode.over_token_limit)
    return FileFit(
        file_id=file_id,
        model=model,
        max_seq_len=max_seq_len,
        prompt_style=prompt_style,
        records=len(loaded.records) + len(over),
        fit=len(loaded.records),
        over_lines=over[:100],
    )


@router.get("/files/{file_id}/records", response_model=FileRecordPage, summary="A page of a file's records")
def file_records(
    file_id: str,
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> FileRecordPage:
    """Records with prompt and answer excerpts and their validation warnings (the dashboard table)."""
    row = owned_file(session, owner, file_id, param="file_id")
    records = _records(settings, row)
    warnings_by_line: dict[int, list[RecordWarning]] = {}
    for warning in row.warnings:
        warnings_by_line.setdefault(warning.line, []).append(warning)
    data = [
        FileRecord(
            index=index,
            line=record.line,
            prompt=excerpt(record.prompt),
            answer=excerpt(record.answer),
            warnings=warnings_by_line.get(record.line, []),
        )
        for index, record in enumerate(records[offset : offset + limit], start=offset)
    ]
    return FileRecordPage(file_id=file_id, offset=offset, limit=limit, total=len(records), data=data)


@router.get(
    "/files/{file_id}/records/{n}/analysis",
    response_model=RecordAnalysis,
    response_model_exclude_none=True,
    summary="Sensitive spans and regions of record n's answer, and a model's confidence in it",
    responses={
        404: {"model": ErrorResponse, "description": "unknown file, record (param n) or model"},
        500: {"model": ErrorResponse, "description": "the confidence pass failed (code generation_failed)"},
        504: {"model": ErrorResponse, "description": "no result within generation_timeout_s"},
    },
)
async def record_analysis(
    file_id: str,
    n: int,
    session: SessionDep,
    owner: OwnerDep,
    settings: SettingsDep,
    model: Annotated[
        str | None,
        Query(
            description="a model id of /v1/models: also return its confidence in "
            "every answer token (one forward pass on a gpu worker)"
        ),
    ] = None,
) -> RecordAnalysis:
    """``analyze_answer`` of the answer of record ``n`` (0-based): spans and regions with their
    categories, as answer character offsets. With ``model``, ``confidence`` adds p (the model's
    probability of each answer token, given the prompt) per token and mean/min p per region."""
    analysis = await run_in_threadpool(_analysis, session, owner, settings, file_id, n)
    if model is None:
        return analysis
    generation_id = await run_in_threadpool(_submit_confidence, session, settings, owner, file_id, n, model)
    scores = (await wait_final(settings, generation_id)).confidence or AnswerScores()
    analysis.confidence = AnswerConfidence(
        model=model,
        low_confidence_threshold=LOW_CONFIDENCE,
        tokens=[token.model_dump() for token in scores.tokens],
        regions=[region.model_dump() for region in scores.regions],
    )
    return analysis


def _records(settings: Settings, row: File) -> list:
    """The records of a dataset file; 400 for a job's result, which holds model files."""
    if row.purpose == RESULTS_PURPOSE:
        raise APIError(
            400,
            f"File '{row.id}' is a fine-tuning job's result (model files), not a dataset; "
            "download it with GET /v1/files/{file_id}/content.",
            code=ErrorCode.NOT_A_DATASET,
            param="file_id",
        )
    return read_records(stored_path(settings.artifacts, row.path), row.purpose)


def _analysis(session: Session, owner: str, settings: Settings, file_id: str, n: int) -> RecordAnalysis:
    row = owned_file(session, owner, file_id, param="file_id")
    records = _records(settings, row)
    if not 0 <= n < len(records):
        raise APIError(
            404,
            f"File '{file_id}' has no record {n} (it has {len(records)}).",
            code=ErrorCode.RECORD_NOT_FOUND,
            param="n",
        )
    record = records[n]
    if record.answer is None:
        raise APIError(
            400,
            f"File '{file_id}' holds eval problems, which have no answer to analyse.",
            code=ErrorCode.NO_ANSWER,
            param="file_id",
        )
    return RecordAnalysis(
        file_id=file_id,
        index=n,
        line=record.line,
        answer=record.answer,
        analysis=analyze_answer(record.answer).to_json(),
    )


def _submit_confidence(session: Session, settings: Settings, owner: str, file_id: str, n: int, model: str) -> str:
    """Create the queued confidence row for record ``n`` and enqueue it; returns its id."""
    spec = model_spec(session, settings, owner, model)
    row = Generation(
        id=new_id("gen"),
        owner=owner,
        model=model,
        kind=GenerationKind.CONFIDENCE,
        request=ConfidenceRequest(file_id=file_id, n=n, model=model, spec=spec),
        status=GenerationStatus.QUEUED,
    )
    session.add(row)
    session.commit()
    send_confidence(settings, row.id)
    return row.id
