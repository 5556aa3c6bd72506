"""job result files (purpose fine-tune-results) and integrations

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 09:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # OpenAI's purpose of a job's results, "fine-tune-results", is 17 characters.
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.alter_column('purpose', existing_type=sa.String(length=16), type_=sa.String(length=32),
                              existing_nullable=False)
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('result_files', sa.JSON(), nullable=False, server_default='[]'))
        batch_op.add_column(sa.Column('integrations', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.drop_column('integrations')
        batch_op.drop_column('result_files')
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.alter_column('purpose', existing_type=sa.String(length=32), type_=sa.String(length=16),
                              existing_nullable=False)
