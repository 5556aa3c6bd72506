"""one form of fine-tuned model id: ft:<base>:<suffix>:<job id>, the suffix part empty when none

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 06:00:00.000000

A job without a suffix named its model ``ft:<base>:<job id>`` (three parts) and one with a suffix
``ft:<base>:<suffix>:<job id>`` (four); now every id has four parts, as OpenAI's do
(``ft:<base>::<job id>``). Stored ids of jobs' results (``fine_tuned_model``) and of the models
jobs tuned on (``model``, a fine-tuned model or one of its checkpoints) move to that form. Ids
kept outside the database still resolve (``db.model_specs.current_model_id``).
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

jobs = sa.table(
    "fine_tuning_jobs",
    sa.column("id", sa.String),
    sa.column("model", sa.String),
    sa.column("fine_tuned_model", sa.String),
)

# A three-part fine-tuned model id, alone or as a checkpoint's prefix; and the four-part id of a
# job without a suffix, alone or as a checkpoint's prefix.
_OLD = re.compile(r"^ft:(?P<base>[^:]+):(?P<job>[^:]+)(?P<rest>:ckpt-step-\d+)?$")
_NEW = re.compile(r"^ft:(?P<base>[^:]+)::(?P<job>[^:]+)(?P<rest>:ckpt-step-\d+)?$")


def _renamed(model_id: str | None, pattern: re.Pattern[str], separator: str) -> str | None:
    match = None if model_id is None else pattern.match(model_id)
    if match is None:
        return model_id
    return f"ft:{match['base']}{separator}{match['job']}{match['rest'] or ''}"


def _rename(pattern: re.Pattern[str], separator: str) -> None:
    connection = op.get_bind()
    for id_, model, tuned in list(connection.execute(sa.select(jobs.c.id, jobs.c.model, jobs.c.fine_tuned_model))):
        new_model, new_tuned = _renamed(model, pattern, separator), _renamed(tuned, pattern, separator)
        if (new_model, new_tuned) != (model, tuned):
            connection.execute(
                jobs.update().where(jobs.c.id == id_).values(model=new_model, fine_tuned_model=new_tuned)
            )


def upgrade() -> None:
    _rename(_OLD, "::")


def downgrade() -> None:
    _rename(_NEW, ":")
