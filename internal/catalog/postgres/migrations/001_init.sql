-- Times are Unix nanoseconds (BIGINT); documents are JSON text.

-- The global resourceVersion counter (one row). Every resource write bumps
-- it first thing in its transaction; the row lock, held to commit,
-- serializes version assignment so versions commit in order.
CREATE TABLE lethe_version (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value BIGINT NOT NULL
);
INSERT INTO lethe_version (id, value) VALUES (1, 0);

CREATE TABLE resources (
    uid              TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    namespace        TEXT NOT NULL,
    name             TEXT NOT NULL,
    phase            TEXT NOT NULL,
    due_at           BIGINT, -- set only while Scheduled
    resource_version BIGINT NOT NULL,
    doc              TEXT NOT NULL,
    UNIQUE (kind, namespace, name)
);
CREATE INDEX resources_due ON resources (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE owner_edges (
    owner_uid            TEXT NOT NULL,
    dependent_uid        TEXT NOT NULL REFERENCES resources (uid) ON DELETE CASCADE,
    block_owner_deletion BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (owner_uid, dependent_uid)
);
CREATE INDEX owner_edges_dependent ON owner_edges (dependent_uid);

CREATE TABLE reference_edges (
    target_kind      TEXT NOT NULL,
    target_namespace TEXT NOT NULL,
    target_name      TEXT NOT NULL,
    referrer_uid     TEXT NOT NULL REFERENCES resources (uid) ON DELETE CASCADE,
    on_target_delete TEXT NOT NULL,
    PRIMARY KEY (target_kind, target_namespace, target_name, referrer_uid)
);
CREATE INDEX reference_edges_referrer ON reference_edges (referrer_uid);

CREATE TABLE changes (
    version BIGINT PRIMARY KEY,
    type    TEXT NOT NULL,
    kind    TEXT NOT NULL,
    doc     TEXT NOT NULL
);

CREATE TABLE tombstones (
    uid       TEXT PRIMARY KEY,
    kind      TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    purged_at BIGINT NOT NULL,
    doc       TEXT NOT NULL
);
CREATE INDEX tombstones_key ON tombstones (kind, namespace, name, purged_at);

CREATE TABLE audit (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts         BIGINT NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    uid        TEXT NOT NULL,
    from_phase TEXT NOT NULL,
    to_phase   TEXT NOT NULL,
    reason     TEXT NOT NULL,
    details    TEXT NOT NULL
);
CREATE INDEX audit_kind_name ON audit (kind, name, id);
CREATE INDEX audit_uid ON audit (uid, id);
CREATE FUNCTION lethe_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION lethe_audit_append_only();

CREATE TABLE work_items (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            TEXT NOT NULL,
    key              TEXT NOT NULL,
    payload          TEXT NOT NULL,
    run_at           BIGINT NOT NULL,
    -- available_at is when the item can next be claimed: run_at while
    -- unleased, the lease expiry while leased. Claims scan only the
    -- available prefix of work_items_available.
    available_at     BIGINT NOT NULL,
    holder           TEXT NOT NULL DEFAULT '',
    lease_expires_at BIGINT NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    UNIQUE (queue, key)
);
CREATE INDEX work_items_available ON work_items (queue, available_at, id);

CREATE TABLE deletion_progress (
    uid TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);

CREATE TABLE item_outcomes (
    uid     TEXT NOT NULL,
    ordinal BIGINT NOT NULL,
    plugin  TEXT NOT NULL,
    doc     TEXT NOT NULL,
    PRIMARY KEY (uid, ordinal, plugin)
);
