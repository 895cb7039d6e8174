-- TRUNCATE skips row triggers, so 001's BEFORE UPDATE OR DELETE trigger
-- did not stop `TRUNCATE audit`. A statement trigger refuses it, for every
-- role, the owner included. Only dropping the trigger (the table's owner or
-- a superuser) or session_replication_role = replica (a superuser) gets
-- past it: see docs/postgres.md for a runtime role that can do neither.
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION lethe_audit_append_only();
