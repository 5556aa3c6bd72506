"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 17:56:29.940078
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('files',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('filename', sa.String(length=255), nullable=False),
    sa.Column('purpose', sa.String(length=16), nullable=False),
    sa.Column('format', sa.String(length=16), nullable=False),
    sa.Column('bytes', sa.Integer(), nullable=False),
    sa.Column('path', sa.String(length=512), nullable=False),
    sa.Column('records', sa.Integer(), nullable=False),
    sa.Column('total_rows', sa.Integer(), nullable=False),
    sa.Column('warnings', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_files_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_files_owner'), ['owner'], unique=False)

    op.create_table('generations',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=255), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('samples', sa.JSON(), nullable=False),
    sa.Column('usage', sa.JSON(), nullable=True),
    sa.Column('timings', sa.JSON(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('generations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_generations_model'), ['model'], unique=False)
        batch_op.create_index(batch_op.f('ix_generations_owner'), ['owner'], unique=False)
        batch_op.create_index(batch_op.f('ix_generations_status'), ['status'], unique=False)

    op.create_table('evals',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=255), nullable=False),
    sa.Column('eval_file', sa.String(length=40), nullable=True),
    sa.Column('problems', sa.String(length=64), nullable=True),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('progress', sa.JSON(), nullable=True),
    sa.Column('aggregate', sa.JSON(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['eval_file'], ['files.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('evals', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evals_created_at'), ['created_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_evals_owner'), ['owner'], unique=False)
        batch_op.create_index(batch_op.f('ix_evals_status'), ['status'], unique=False)

    op.create_table('fine_tuning_jobs',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=False),
    sa.Column('idempotency_key', sa.String(length=255), nullable=True),
    sa.Column('model', sa.String(length=255), nullable=False),
    sa.Column('training_file', sa.String(length=40), nullable=False),
    sa.Column('validation_file', sa.String(length=40), nullable=True),
    sa.Column('method', sa.JSON(), nullable=False),
    sa.Column('hyperparameters', sa.JSON(), nullable=False),
    sa.Column('suffix', sa.String(length=64), nullable=True),
    sa.Column('seed', sa.Integer(), nullable=False),
    sa.Column('metadata', sa.JSON(), nullable=True),
    sa.Column('status', sa.String(length=24), nullable=False),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('fine_tuned_model', sa.String(length=255), nullable=True),
    sa.Column('output_dir', sa.String(length=512), nullable=True),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('total_steps', sa.Integer(), nullable=True),
    sa.Column('trained_tokens', sa.Integer(), nullable=True),
    sa.Column('eta_s', sa.Float(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=True),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.Column('heartbeat_at', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['training_file'], ['files.id'], ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['validation_file'], ['files.id'], ondelete='RESTRICT'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('owner', 'idempotency_key', name='uq_jobs_owner_idempotency_key')
    )
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_fine_tuning_jobs_fine_tuned_model'), ['fine_tuned_model'], unique=False)
        batch_op.create_index(batch_op.f('ix_fine_tuning_jobs_status'), ['status'], unique=False)
        batch_op.create_index('ix_jobs_owner_created', ['owner', 'created_at'], unique=False)

    op.create_table('eval_problems',
    sa.Column('eval_id', sa.String(length=40), nullable=False),
    sa.Column('problem_id', sa.String(length=255), nullable=False),
    sa.Column('row', sa.JSON(), nullable=False),
    sa.Column('samples', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['eval_id'], ['evals.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('eval_id', 'problem_id')
    )
    op.create_table('fine_tuning_job_checkpoints',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('job_id', sa.String(length=40), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('path', sa.String(length=512), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['fine_tuning_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', 'step', name='uq_checkpoints_job_step')
    )
    with op.batch_alter_table('fine_tuning_job_checkpoints', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_fine_tuning_job_checkpoints_job_id'), ['job_id'], unique=False)

    op.create_table('fine_tuning_job_events',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('job_id', sa.String(length=40), nullable=False),
    sa.Column('level', sa.String(length=8), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['fine_tuning_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('fine_tuning_job_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_fine_tuning_job_events_job_id'), ['job_id'], unique=False)

    op.create_table('fine_tuning_job_metrics',
    sa.Column('job_id', sa.String(length=40), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('values', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['fine_tuning_jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'step')
    )


def downgrade() -> None:
    op.drop_table('fine_tuning_job_metrics')
    with op.batch_alter_table('fine_tuning_job_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_fine_tuning_job_events_job_id'))

    op.drop_table('fine_tuning_job_events')
    with op.batch_alter_table('fine_tuning_job_checkpoints', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_fine_tuning_job_checkpoints_job_id'))

    op.drop_table('fine_tuning_job_checkpoints')
    op.drop_table('eval_problems')
    with op.batch_alter_table('fine_tuning_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_owner_created')
        batch_op.drop_index(batch_op.f('ix_fine_tuning_jobs_status'))
        batch_op.drop_index(batch_op.f('ix_fine_tuning_jobs_fine_tuned_model'))

    op.drop_table('fine_tuning_jobs')
    with op.batch_alter_table('evals', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evals_status'))
        batch_op.drop_index(batch_op.f('ix_evals_owner'))
        batch_op.drop_index(batch_op.f('ix_evals_created_at'))

    op.drop_table('evals')
    with op.batch_alter_table('generations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_generations_status'))
        batch_op.drop_index(batch_op.f('ix_generations_owner'))
        batch_op.drop_index(batch_op.f('ix_generations_model'))

    op.drop_table('generations')
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_files_owner'))
        batch_op.drop_index(batch_op.f('ix_files_created_at'))

    op.drop_table('files')
