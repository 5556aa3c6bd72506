"""a generation's attempts in a table of their own (generation_samples) instead of one JSON array

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 16:50:00.000000

Each item of ``generations.samples`` becomes a row; a decoding flush or a verification then writes
one attempt instead of the whole array. A confidence request's answer (its one "sample") moves to
``generations.confidence``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

_DEFAULTS = {'prompt_index': 0, 'round': 0, 'text': '', 'prompt_tokens': 0, 'completion_tokens': 0, 'cancelled': False}

generations = sa.table(
    'generations',
    sa.column('id', sa.String),
    sa.column('kind', sa.String),
    sa.column('samples', sa.JSON),
    sa.column('confidence', sa.JSON),
)
samples = sa.table(
    'generation_samples',
    sa.column('generation_id', sa.String),
    sa.column('index', sa.Integer),
    sa.column('prompt_index', sa.Integer),
    sa.column('round', sa.Integer),
    sa.column('repair_of', sa.Integer),
    sa.column('text', sa.Text),
    sa.column('finish_reason', sa.String),
    sa.column('prompt_tokens', sa.Integer),
    sa.column('completion_tokens', sa.Integer),
    sa.column('code', sa.Text),
    sa.column('verification', sa.JSON),
    sa.column('cancelled', sa.Boolean),
)
_COLUMNS = tuple(column.name for column in samples.c if column.name not in ('generation_id', 'index'))


def upgrade() -> None:
    # Read first: on SQLite, dropping a column rebuilds the table, and dropping the old copy would
    # delete (ON DELETE CASCADE) any attempt rows already pointing at it.
    connection = op.get_bind()
    stored = list(connection.execute(sa.select(generations.c.id, generations.c.kind, generations.c.samples)))
    with op.batch_alter_table('generations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('confidence', sa.JSON(), nullable=True))
        batch_op.drop_column('samples')
    op.create_table(
        'generation_samples',
        sa.Column('generation_id', sa.String(length=40), nullable=False),
        sa.Column('index', sa.Integer(), nullable=False),
        sa.Column('prompt_index', sa.Integer(), nullable=False),
        sa.Column('round', sa.Integer(), nullable=False),
        sa.Column('repair_of', sa.Integer(), nullable=True),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('finish_reason', sa.String(length=32), nullable=True),
        sa.Column('prompt_tokens', sa.Integer(), nullable=False),
        sa.Column('completion_tokens', sa.Integer(), nullable=False),
        sa.Column('code', sa.Text(), nullable=True),
        sa.Column('verification', sa.JSON(), nullable=True),
        sa.Column('cancelled', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['generation_id'], ['generations.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('generation_id', 'index'),
    )
    for row in stored:
        attempts = list(row.samples or [])
        if row.kind == 'confidence':
            if attempts:
                connection.execute(
                    generations.update().where(generations.c.id == row.id).values(confidence=attempts[0])
                )
            continue
        for position, sample in enumerate(attempts):
            values = {name: sample.get(name, _DEFAULTS.get(name)) for name in _COLUMNS}
            connection.execute(
                samples.insert().values(generation_id=row.id, index=sample.get('index', position), **values)
            )


def downgrade() -> None:
    connection = op.get_bind()
    by_generation: dict[str, list[dict]] = {}
    for row in connection.execute(sa.select(samples).order_by(samples.c.generation_id, samples.c.index)):
        sample = {'index': row.index, **{name: getattr(row, name) for name in _COLUMNS}}
        by_generation.setdefault(row.generation_id, []).append(sample)
    confidence = dict(connection.execute(sa.select(generations.c.id, generations.c.confidence)).all())
    op.drop_table('generation_samples')  # before the rebuilds below (see upgrade)
    with op.batch_alter_table('generations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('samples', sa.JSON(), nullable=True))
    for generation_id, answer in confidence.items():
        stored = [answer] if answer is not None else by_generation.get(generation_id, [])
        connection.execute(generations.update().where(generations.c.id == generation_id).values(samples=stored))
    with op.batch_alter_table('generations', schema=None) as batch_op:
        batch_op.alter_column('samples', existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column('confidence')
