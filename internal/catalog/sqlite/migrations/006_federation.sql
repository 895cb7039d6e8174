-- Federation (docs/federation.md): references across Lethe servers.
-- Times are Unix nanoseconds.

-- Forward edges: a local referrer's reference to a resource on a peer.
-- The referrer believes in the peer's stub only once state is
-- 'Acknowledged'.
CREATE TABLE peer_references (
    referrer_uid       TEXT NOT NULL,
    referrer_kind      TEXT NOT NULL,
    referrer_namespace TEXT NOT NULL,
    referrer_name      TEXT NOT NULL,
    peer               TEXT NOT NULL,
    target_kind        TEXT NOT NULL,
    target_namespace   TEXT NOT NULL,
    target_name        TEXT NOT NULL,
    on_target_delete   TEXT NOT NULL,
    idempotency_key    TEXT NOT NULL UNIQUE,
    state              TEXT NOT NULL,
    reason             TEXT NOT NULL DEFAULT '',
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    PRIMARY KEY (referrer_uid, peer, target_kind, target_namespace, target_name)
);

-- Back-reference stubs: the remote referrers of local resources, stored
-- when this peer acknowledged their intent.
CREATE TABLE peer_back_references (
    target_kind        TEXT NOT NULL,
    target_namespace   TEXT NOT NULL,
    target_name        TEXT NOT NULL,
    peer               TEXT NOT NULL,
    referrer_uid       TEXT NOT NULL,
    referrer_kind      TEXT NOT NULL,
    referrer_namespace TEXT NOT NULL,
    referrer_name      TEXT NOT NULL,
    on_target_delete   TEXT NOT NULL,
    idempotency_key    TEXT NOT NULL,
    created_at         BIGINT NOT NULL,
    PRIMARY KEY (target_kind, target_namespace, target_name, peer, referrer_uid),
    UNIQUE (peer, idempotency_key)
);

-- The peer outbox, written in the same transaction as the change that
-- causes each message; delivered at least once.
CREATE TABLE peer_messages (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    peer             TEXT NOT NULL,
    type             TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    epoch            BIGINT NOT NULL DEFAULT 0,
    body             TEXT NOT NULL,
    state            TEXT NOT NULL,
    next_attempt_at  BIGINT NOT NULL,
    available_at     BIGINT,
    holder           TEXT NOT NULL DEFAULT '',
    lease_expires_at BIGINT NOT NULL DEFAULT 0,
    lease            BIGINT NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    delivered_at     BIGINT NOT NULL DEFAULT 0,
    UNIQUE (peer, type, idempotency_key, epoch)
);
CREATE INDEX peer_messages_available ON peer_messages (available_at, id) WHERE available_at IS NOT NULL;
