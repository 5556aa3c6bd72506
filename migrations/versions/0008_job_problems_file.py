"""a self-training job's problems file

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 22:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('problems_file', sa.String(length=40), nullable=True))
        batch_op.create_foreign_key(
            'fk_fine_tuning_jobs_problems_file', 'files', ['problems_file'], ['id'], ondelete='RESTRICT'
        )


def downgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_fine_tuning_jobs_problems_file', type_='foreignkey')
        batch_op.drop_column('problems_file')
