"""eval attempts in rows: eval_attempts, and eval_problems rows that exist (with the problem's code)
before they are recorded

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 15:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'eval_attempts',
        sa.Column('eval_id', sa.String(length=40), nullable=False),
        sa.Column('problem_id', sa.String(length=255), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('round', sa.Integer(), nullable=False),
        sa.Column('repair_of', sa.Integer(), nullable=True),
        sa.Column('answer', sa.JSON(), nullable=False),
        sa.Column('record', sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(['eval_id'], ['evals.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('eval_id', 'problem_id', 'index'),
    )
    with op.batch_alter_table('eval_problems', schema=None) as batch_op:
        batch_op.add_column(sa.Column('code', sa.Text(), nullable=True))
        batch_op.alter_column('row', existing_type=sa.JSON(), nullable=True)
        batch_op.alter_column('samples', existing_type=sa.JSON(), nullable=True)


def downgrade() -> None:
    # Problems not yet recorded have no row to keep in the old schema.
    op.execute(sa.text('DELETE FROM eval_problems WHERE "row" IS NULL OR samples IS NULL'))
    with op.batch_alter_table('eval_problems', schema=None) as batch_op:
        batch_op.alter_column('samples', existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column('row', existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column('code')
    op.drop_table('eval_attempts')
