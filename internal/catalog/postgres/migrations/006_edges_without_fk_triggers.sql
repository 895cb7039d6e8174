-- The edge tables lose their foreign keys to resources: the two writers
-- that delete resources (Purge and CollectBatch) delete the edges
-- themselves, set-based, in the same transaction. ON DELETE CASCADE ran
-- one trigger query per deleted resource and table, most of the cost of a
-- batch purge on PostgreSQL.
ALTER TABLE owner_edges DROP CONSTRAINT IF EXISTS owner_edges_dependent_uid_fkey;
ALTER TABLE reference_edges DROP CONSTRAINT IF EXISTS reference_edges_referrer_uid_fkey;
