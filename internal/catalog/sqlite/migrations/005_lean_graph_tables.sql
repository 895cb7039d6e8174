-- The graph tables are rebuilt leaner; the rows are copied unchanged.
--
-- owner_edges and reference_edges lose their foreign keys to resources:
-- the two writers that delete resources (Purge and CollectBatch) delete
-- the edges themselves, set-based, in the same transaction (PostgreSQL's
-- migration 006 does the same). ON DELETE CASCADE ran a trigger program
-- per deleted resource and table.
--
-- owner_edges, reference_edges and tombstones become WITHOUT ROWID
-- tables clustered on their primary key: one B-tree less each, so one
-- index entry less to write per edge and per purged resource.
CREATE TABLE owner_edges_005 (
    owner_uid            TEXT NOT NULL,
    dependent_uid        TEXT NOT NULL,
    block_owner_deletion INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (owner_uid, dependent_uid)
) WITHOUT ROWID;
INSERT INTO owner_edges_005 (owner_uid, dependent_uid, block_owner_deletion)
SELECT owner_uid, dependent_uid, block_owner_deletion FROM owner_edges;
DROP TABLE owner_edges;
ALTER TABLE owner_edges_005 RENAME TO owner_edges;
CREATE INDEX owner_edges_dependent ON owner_edges (dependent_uid);

CREATE TABLE reference_edges_005 (
    target_kind      TEXT NOT NULL,
    target_namespace TEXT NOT NULL,
    target_name      TEXT NOT NULL,
    referrer_uid     TEXT NOT NULL,
    on_target_delete TEXT NOT NULL,
    PRIMARY KEY (target_kind, target_namespace, target_name, referrer_uid)
) WITHOUT ROWID;
INSERT INTO reference_edges_005 (target_kind, target_namespace, target_name, referrer_uid, on_target_delete)
SELECT target_kind, target_namespace, target_name, referrer_uid, on_target_delete FROM reference_edges;
DROP TABLE reference_edges;
ALTER TABLE reference_edges_005 RENAME TO reference_edges;
CREATE INDEX reference_edges_referrer ON reference_edges (referrer_uid);

CREATE TABLE tombstones_005 (
    uid       TEXT PRIMARY KEY,
    kind      TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    purged_at INTEGER NOT NULL,
    doc       TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO tombstones_005 (uid, kind, namespace, name, purged_at, doc)
SELECT uid, kind, namespace, name, purged_at, doc FROM tombstones;
DROP TABLE tombstones;
ALTER TABLE tombstones_005 RENAME TO tombstones;
CREATE INDEX tombstones_key ON tombstones (kind, namespace, name, purged_at);
