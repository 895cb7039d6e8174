-- The references that hold their target (every onTargetDelete but
-- allowDangling), by target: CollectBatch's check that nothing holds a
-- candidate reads this index, which stays small whatever the number of
-- dangling-allowed references. Without it, once ANALYZE (autovacuum) has
-- seen that almost every reference allows dangling, the planner estimated
-- one matching row and ran the check as a sequential scan of
-- reference_edges per candidate: 23 ms each at 1M resources.
CREATE INDEX reference_edges_held ON reference_edges (target_kind, target_namespace, target_name)
    WHERE on_target_delete <> 'allowDangling';

-- tombstones is analyzed only to invalidate the plans connections cached
-- while it was small (see statsKeeper in stats.go): a sample of 300 rows
-- of its uid, its primary key, is plenty and cheap.
ALTER TABLE tombstones ALTER COLUMN uid SET STATISTICS 1;

-- Dependents reads the edges of one owner. With statistics, an owner of
-- 1 % of owner_edges (100 × 1,000 dependents) was planned as a sequential
-- scan of owner_edges, on every call: its owner_uid is left unanalyzed,
-- so that the lookup stays on the index (dependent_uid keeps statistics:
-- CollectBatch's edge deletes need them).
ALTER TABLE owner_edges ALTER COLUMN owner_uid SET STATISTICS 0;
