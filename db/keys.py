"""API keys: create (the key is shown once), look up by the presented key, list, revoke."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.ids import new_id
from db.models import ApiKey

KEY_PREFIX = "cuset-sk-"


def hash_key(key: str) -> str:
    """SHA-256 hex of a presented key (what the database stores)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class NewKey:
    """A freshly created key; ``secret`` exists only here and is never stored."""

    row: ApiKey
    secret: str


def create_key(session: Session, name: str, owner: str | None = None) -> NewKey:
    """A new random key (256 bits) for ``owner`` (default: the name). The caller commits."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(
        id=new_id("key"), owner=owner or name, name=name, prefix=secret[: len(KEY_PREFIX) + 6], hash=hash_key(secret)
    )
    session.add(row)
    session.flush()
    return NewKey(row, secret)


def owner_of(session: Session, secret: str) -> str | None:
    """The owner of an active key, or None for an unknown or revoked one."""
    row = session.scalar(select(ApiKey).where(ApiKey.hash == hash_key(secret), ApiKey.revoked_at.is_(None)))
    return row.owner if row else None


def list_keys(session: Session) -> list[ApiKey]:
    """Every key, newest first (secrets are not stored, so none are shown)."""
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at.desc())))


def revoke_key(session: Session, key_id_or_prefix: str) -> ApiKey | None:
    """Revoke the key with this id or display prefix; None when there is no such active key."""
    row = session.scalar(
        select(ApiKey).where(
            (ApiKey.id == key_id_or_prefix) | (ApiKey.prefix == key_id_or_prefix), ApiKey.revoked_at.is_(None)
        )
    )
    if row:
        row.revoked_at = time.time()
    return row


def has_keys(session: Session) -> bool:
    """Whether any active key exists (the embedded service makes a first one when not)."""
    return session.scalar(select(ApiKey.id).where(ApiKey.revoked_at.is_(None)).limit(1)) is not None
