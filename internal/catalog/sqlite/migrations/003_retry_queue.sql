-- The retry queue (internal/retry): one row per thing whose deletion
-- cannot finish yet. available_at is when the row can next be claimed:
-- its next attempt while retryable, its lease expiry while running, NULL
-- once discarded, so claims and the next-due timer read only the
-- available prefix of one partial index.
CREATE TABLE retries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT NOT NULL,
    key              TEXT NOT NULL,
    item_id          TEXT NOT NULL,
    plugin           TEXT NOT NULL,
    owner_uid        TEXT NOT NULL,
    state            TEXT NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    available_at     INTEGER,
    holder           TEXT NOT NULL DEFAULT '',
    lease_expires_at INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL,
    last_error       TEXT NOT NULL,
    history          TEXT NOT NULL,
    first_seen_at    INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (kind, key, item_id, plugin)
);
CREATE INDEX retries_available ON retries (available_at, id) WHERE available_at IS NOT NULL;
CREATE INDEX retries_state ON retries (state, id);
CREATE INDEX retries_key ON retries (key);
CREATE INDEX retries_owner ON retries (owner_uid);

-- The outbox of notifications, written in the same transaction as the
-- event they announce; delivered at least once.
CREATE TABLE notifications (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id         TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    target           TEXT NOT NULL,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    available_at     INTEGER,
    holder           TEXT NOT NULL DEFAULT '',
    lease_expires_at INTEGER NOT NULL DEFAULT 0,
    epoch            INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    delivered_at     INTEGER NOT NULL DEFAULT 0,
    UNIQUE (event_id, target)
);
CREATE INDEX notifications_available ON notifications (available_at, id) WHERE available_at IS NOT NULL;
