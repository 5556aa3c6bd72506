"""a job's training request in one typed document (spec) instead of four columns

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 19:20:00.000000

``spec`` holds cuset_core's JobSpec: method, lora, hyperparameters (the core fields only),
save_steps, seed and integrations. The stored OpenAI names (n_epochs, batch_size,
learning_rate_multiplier) are not kept: the API computes them when it shows a job. Fields a
JobSpec has and an old row lacked get their defaults when the row is read.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# The OpenAI view's names and the keys stored beside the core hyperparameters before this revision.
_OPENAI = ('n_epochs', 'learning_rate_multiplier')
_BESIDE = ('lora', 'save_steps')
_DEFAULT_LEARNING_RATE = 2e-4  # Hyperparameters().learning_rate when this revision was written

jobs = sa.table(
    'fine_tuning_jobs',
    sa.column('id', sa.String),
    sa.column('method', sa.JSON),
    sa.column('hyperparameters', sa.JSON),
    sa.column('seed', sa.Integer),
    sa.column('integrations', sa.JSON),
    sa.column('spec', sa.JSON),
)


def upgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('spec', sa.JSON(), nullable=True))
    connection = op.get_bind()
    for row in connection.execute(sa.select(jobs.c.id, jobs.c.method, jobs.c.hyperparameters, jobs.c.seed, jobs.c.integrations)):
        stored = dict(row.hyperparameters or {})
        spec = {
            'method': row.method or {},
            'hyperparameters': {k: v for k, v in stored.items() if k not in _OPENAI + _BESIDE},
            'seed': row.seed or 0,
            'integrations': row.integrations or [],
        }
        spec.update({k: stored[k] for k in _BESIDE if k in stored})
        connection.execute(jobs.update().where(jobs.c.id == row.id).values(spec=spec))
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.alter_column('spec', existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column('method')
        batch_op.drop_column('hyperparameters')
        batch_op.drop_column('seed')
        batch_op.drop_column('integrations')


def downgrade() -> None:
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('method', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('hyperparameters', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('seed', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('integrations', sa.JSON(), nullable=True))
    connection = op.get_bind()
    for row in connection.execute(sa.select(jobs.c.id, jobs.c.spec)):
        spec = dict(row.spec or {})
        hyper = dict(spec.get('hyperparameters') or {})
        openai = {
            'n_epochs': hyper.get('epochs', 1.0),
            'learning_rate_multiplier': hyper.get('learning_rate', _DEFAULT_LEARNING_RATE) / _DEFAULT_LEARNING_RATE,
        }
        hyperparameters = {**openai, **hyper, **{k: spec[k] for k in _BESIDE if k in spec}}
        connection.execute(
            jobs.update()
            .where(jobs.c.id == row.id)
            .values(
                method=spec.get('method') or {},
                hyperparameters=hyperparameters,
                seed=spec.get('seed', 0),
                integrations=spec.get('integrations') or None,
            )
        )
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.alter_column('method', existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column('hyperparameters', existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column('seed', existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column('spec')
