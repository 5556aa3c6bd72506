"""eval heartbeat

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 18:25:06.285400
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('evals', schema=None) as batch_op:
        batch_op.add_column(sa.Column('heartbeat_at', sa.Float(), nullable=True))



def downgrade() -> None:
    with op.batch_alter_table('evals', schema=None) as batch_op:
        batch_op.drop_column('heartbeat_at')

