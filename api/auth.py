"""Who is calling: API keys from ``Authorization: Bearer <key>`` (the openai client's header),
and the per-key request rate limit (a token bucket in Redis, shared by every API process)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import redis
from fastapi import Request
from starlette.concurrency import run_in_threadpool

from api.errors import APIError
from db.errors import ErrorCode
from db.keys import hash_key, owner_of
from db.models import DEFAULT_OWNER
from db.session import session_factory
from db.settings import Settings

# Keys are looked up at most once per this many seconds per API process; a revoked key stops
# working within this time.
KEY_CACHE_TTL_S = 5.0

# KEYS[1] bucket; ARGV: rate (tokens/s), burst, now (s). Returns 1 when a token was taken.
_TOKEN_BUCKET = """
local rate, burst, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens, at = tonumber(state[1]) or burst, tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'at', now)
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return allowed
"""


class KeyCache:
    """Key hash -> owner for recently seen keys of one API process.

    A hit answers without the database for ``ttl_s`` seconds, so a key revoked elsewhere (the
    ``cuset keys revoke`` command, another API process) stops working within that time; a key
    found revoked or unknown is forgotten at once."""

    def __init__(self, ttl_s: float = KEY_CACHE_TTL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._seen: dict[str, tuple[str, float]] = {}

    def cached(self, secret: str) -> str | None:
        """The owner of a key verified less than ``ttl_s`` ago, else None (look it up)."""
        hit = self._seen.get(hash_key(secret))
        if hit and self._clock() - hit[1] < self.ttl_s:
            return hit[0]
        return None

    def lookup(self, settings: Settings, secret: str) -> str | None:
        """The owner of an active key from the database (blocking; call it from a thread), now
        cached; None for an unknown or revoked key."""
        digest = hash_key(secret)
        session = session_factory(settings.resolved_database_url)()
        try:
            owner = owner_of(session, secret)
        finally:
            session.close()
        if owner is None:
            self._seen.pop(digest, None)
        else:
            self._seen[digest] = (owner, self._clock())
        return owner


class RateLimiter:
    """Token bucket per key in Redis; off when no Redis is configured or the rate is 0."""

    def __init__(self, settings: Settings) -> None:
        self.rate, self.burst = settings.rate_limit_rps, settings.rate_limit_burst
        url = settings.resolved_redis_url
        self._redis = redis.Redis.from_url(url, socket_timeout=1) if url and self.rate > 0 else None
        self._script = self._redis.register_script(_TOKEN_BUCKET) if self._redis else None
        self._prefix = f"{settings.broker_key_prefix}cuset:rate:"

    @property
    def enabled(self) -> bool:
        """Whether ``allow`` asks Redis (otherwise it allows everything)."""
        return self._script is not None

    def allow(self, secret: str) -> bool:
        """Take one token for this key; True when the request may go on. Fails open if Redis is
        unreachable (a limiter outage must not take the API down). Blocking: one Redis round trip."""
        if self._script is None:
            return True
        bucket = self._prefix + hashlib.sha256(secret.encode()).hexdigest()[:32]
        try:
            return bool(self._script(keys=[bucket], args=[self.rate, self.burst, time.time()]))
        except redis.RedisError:
            return True


async def authenticate(request: Request, settings: Settings) -> str:
    """The owner behind the request's API key (or the local owner when auth is off).

    Raises 401 for a missing, malformed, unknown or revoked key and 429 over the rate limit.
    A recently verified key with the rate limit off costs no thread hand-off and no round trip;
    the database and Redis calls run in the thread pool, off the event loop."""
    if not settings.auth:
        return DEFAULT_OWNER
    scheme, _, secret = request.headers.get("authorization", "").partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise APIError(
            401,
            "Missing API key: send the header 'Authorization: Bearer <key>' "
            "(create a key with `cuset keys create --name NAME`).",
            code=ErrorCode.MISSING_API_KEY,
        )
    keys: KeyCache = request.app.state.key_cache
    owner = keys.cached(secret) or await run_in_threadpool(keys.lookup, settings, secret)
    if owner is None:
        raise APIError(401, "Invalid or revoked API key.", code=ErrorCode.INVALID_API_KEY)
    limiter: RateLimiter = request.app.state.rate_limiter
    if limiter.enabled and not await run_in_threadpool(limiter.allow, secret):
        raise APIError(
            429,
            f"Rate limit of {settings.rate_limit_rps:g} requests/s for this key exceeded; retry shortly.",
            code=ErrorCode.RATE_LIMIT_EXCEEDED,
        )
    return owner
