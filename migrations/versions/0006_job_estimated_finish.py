"""a job's estimated finish, fixed when its progress is recorded

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 16:15:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('estimated_finish', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.drop_column('estimated_finish')
