"""The per-process API key cache: verified keys skip the database for ``ttl_s``, revoked keys
stop working once that has passed, and unknown or revoked keys are never remembered."""

from __future__ import annotations

from api.auth import KeyCache
from db.keys import revoke_key
from db.session import session_scope
from tests.integration.security_support import assert_error, new_key, secure_client
from tests.real_service import wait_for


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _revoke(database_url: str, secret: str) -> None:
    with session_scope(database_url) as session:
        assert revoke_key(session, secret[: len("cuset-sk-") + 6]) is not None


def test_a_verified_key_is_answered_from_the_cache_until_its_ttl_passes(service_settings, database_url):
    clock = Clock()
    cache = KeyCache(ttl_s=5.0, clock=clock)
    secret = new_key(database_url, owner="cache-owner")
    assert cache.cached(secret) is None  # never seen: the caller must look it up
    assert cache.lookup(service_settings, secret) == "cache-owner"

    _revoke(database_url, secret)
    clock.now += 4.9
    assert cache.cached(secret) == "cache-owner"  # bounded staleness: the database is not asked

    clock.now += 0.2
    assert cache.cached(secret) is None
    assert cache.lookup(service_settings, secret) is None  # the revocation is seen ...
    assert cache.cached(secret) is None  # ... and the key forgotten, not cached as refused


def test_unknown_and_revoked_keys_are_never_cached(service_settings, database_url):
    cache = KeyCache(ttl_s=60.0, clock=Clock())
    revoked = new_key(database_url, revoked=True)
    for secret in ("cuset-sk-not-a-key", revoked):
        assert cache.lookup(service_settings, secret) is None
        assert cache.cached(secret) is None


def test_a_key_revoked_while_in_use_is_refused_by_the_api(service_settings, database_url):
    secret = new_key(database_url)
    with secure_client(service_settings, secret) as client:
        client.app.state.key_cache = KeyCache(ttl_s=0.5)
        assert client.get("/v1/fine_tuning/jobs").status_code == 200  # now cached
        _revoke(database_url, secret)
        wait_for(lambda: client.get("/v1/fine_tuning/jobs").status_code == 401, timeout=30, what="revoked key refused")
        assert_error(client.get("/v1/fine_tuning/jobs"), 401, "invalid_api_key")
