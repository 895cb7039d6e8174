-- Identifiers (UIDs, kinds, namespaces, names, queue keys) compare and
-- sort by their bytes: COLLATE "C". Under a database's default collation
-- (C.UTF-8, en_US.UTF-8...) every B-tree comparison of these columns went
-- through the locale (strcoll), about a tenth of the server's CPU in a
-- cascade; and List's order followed the locale, where SQLite and Go sort
-- by bytes. Equality is the same under both; only the order of List
-- under a non-C locale changes, to the order SQLite already gives. The
-- tables are not rewritten; their indexes are rebuilt.
ALTER TABLE resources
    ALTER COLUMN uid TYPE TEXT COLLATE "C",
    ALTER COLUMN kind TYPE TEXT COLLATE "C",
    ALTER COLUMN namespace TYPE TEXT COLLATE "C",
    ALTER COLUMN name TYPE TEXT COLLATE "C",
    ALTER COLUMN phase TYPE TEXT COLLATE "C";
ALTER TABLE owner_edges
    ALTER COLUMN owner_uid TYPE TEXT COLLATE "C",
    ALTER COLUMN dependent_uid TYPE TEXT COLLATE "C";
ALTER TABLE reference_edges
    ALTER COLUMN target_kind TYPE TEXT COLLATE "C",
    ALTER COLUMN target_namespace TYPE TEXT COLLATE "C",
    ALTER COLUMN target_name TYPE TEXT COLLATE "C",
    ALTER COLUMN referrer_uid TYPE TEXT COLLATE "C",
    ALTER COLUMN on_target_delete TYPE TEXT COLLATE "C";
ALTER TABLE changes
    ALTER COLUMN kind TYPE TEXT COLLATE "C";
ALTER TABLE tombstones
    ALTER COLUMN uid TYPE TEXT COLLATE "C",
    ALTER COLUMN kind TYPE TEXT COLLATE "C",
    ALTER COLUMN namespace TYPE TEXT COLLATE "C",
    ALTER COLUMN name TYPE TEXT COLLATE "C";
ALTER TABLE audit
    ALTER COLUMN kind TYPE TEXT COLLATE "C",
    ALTER COLUMN name TYPE TEXT COLLATE "C",
    ALTER COLUMN uid TYPE TEXT COLLATE "C";
ALTER TABLE work_items
    ALTER COLUMN queue TYPE TEXT COLLATE "C",
    ALTER COLUMN key TYPE TEXT COLLATE "C";
ALTER TABLE deletion_progress
    ALTER COLUMN uid TYPE TEXT COLLATE "C";
ALTER TABLE item_outcomes
    ALTER COLUMN uid TYPE TEXT COLLATE "C",
    ALTER COLUMN plugin TYPE TEXT COLLATE "C";
ALTER TABLE retries
    ALTER COLUMN kind TYPE TEXT COLLATE "C",
    ALTER COLUMN key TYPE TEXT COLLATE "C",
    ALTER COLUMN item_id TYPE TEXT COLLATE "C",
    ALTER COLUMN plugin TYPE TEXT COLLATE "C",
    ALTER COLUMN owner_uid TYPE TEXT COLLATE "C",
    ALTER COLUMN state TYPE TEXT COLLATE "C";
ALTER TABLE leader_leases
    ALTER COLUMN name TYPE TEXT COLLATE "C";
-- Kept from 007 (a type change may reset them).
ALTER TABLE tombstones ALTER COLUMN uid SET STATISTICS 1;
ALTER TABLE owner_edges ALTER COLUMN owner_uid SET STATISTICS 0;
