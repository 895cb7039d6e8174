-- Leader leases: one row per named lease that replicas compete for (the
-- singleton loops of `lethe server`). holder is '' while the lease is free.
-- Times are Unix nanoseconds.
CREATE TABLE leader_leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL DEFAULT '',
    term        BIGINT NOT NULL DEFAULT 0,
    acquired_at BIGINT NOT NULL DEFAULT 0,
    renewed_at  BIGINT NOT NULL DEFAULT 0,
    expires_at  BIGINT NOT NULL DEFAULT 0
);
