"""The store's Lua scripts, one ``.lua`` file each, loaded once as :class:`Script` constants.

Every multi-key step of the store is one script on the chat's hash-tag slot, so it is atomic on a
single server and on Redis Cluster alike. ``helpers.lua`` (the checks that raise before any write,
the id counter, the snapshot read) is put in front of each script that uses it, and
``bucket_helpers.lua`` (the server clock, a bucket's refill) in front of the send budget's: Redis
has no shared library between EVAL calls. Each file's header says its KEYS, ARGV, checks, writes
and what it returns.

The constant names are the names the store's scripts are reported by (``evals/bench_throughput``
labels each EVALSHA it counts with one, lower-cased).
"""

from __future__ import annotations

from importlib import resources

from gateway.store.channel import Script


def source(name: str) -> str:
    """The text of ``<name>.lua`` in this package (read as package data, so it works from a wheel)."""
    return resources.files(__name__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def load(name: str, *, helpers: str | None = "helpers") -> Script:
    """``<name>.lua`` as a script, with its helpers file in front unless it needs none."""
    return Script.of(source(helpers) + source(name) if helpers else source(name))


# Sessions, the lock and the inbox (helpers.lua).
INTAKE = load("intake")
CREATE_SESSION = load("create_session")
REPLACE_MISSING = load("replace_missing_session")
POINT_AT = load("point_at_session")
OUTLINE = load("session_outline", helpers=None)
ACQUIRE = load("acquire_lock")
EXTEND = load("extend_lock", helpers=None)
RELEASE = load("release_lock", helpers=None)
FINISH_ENTRY = load("finish_entry")
SNAPSHOT = load("snapshot")
APPEND = load("append")
ARCHIVE_ORIGINAL = load("archive_original")
READ_ACTIVE = load("read_active")
READ_ARCHIVE = load("read_archive")
QUARANTINE = load("quarantine")
STORE_REPAIR = load("store_repair")
UPDATE_META = load("update_meta")
COMMIT = load("commit_compaction")
# A reply's journal and a chat's outage record.
REPLY_RECORD = load("reply_record")
OUTAGE_FAILED = load("outage_failed", helpers=None)
# The send budget's token buckets (bucket_helpers.lua).
BUCKET_TAKE = load("bucket_take", helpers="bucket_helpers")
BUCKET_REFUND = load("bucket_refund", helpers="bucket_helpers")
BUCKET_PAUSE = load("bucket_pause", helpers="bucket_helpers")
BUCKET_PEEK = load("bucket_peek", helpers="bucket_helpers")
# A chat's media items, kept by content hash within its byte allowance.
MEDIA_PUT = load("media_put")
# Spending against a budget: a model call's worst case reserved, then settled to its cost.
SPEND_RESERVE = load("spend_reserve")
SPEND_SETTLE = load("spend_settle")
# Leases: which process of the cluster does a thing only one may do (poll a Telegram token).
LEASE_RENEW = load("lease_renew", helpers=None)
LEASE_RELEASE = load("lease_release", helpers=None)
# Model windows that context-length refusals taught, for every process.
WINDOW_LEARN = load("window_learn", helpers=None)
