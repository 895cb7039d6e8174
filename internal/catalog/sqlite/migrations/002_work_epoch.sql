-- epoch grows by one at every claim of a work item, also when the same
-- holder claims it again: it names one claim, and every write made under
-- that claim (checkpoints, finalizer removal, purge) checks it.
ALTER TABLE work_items ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
