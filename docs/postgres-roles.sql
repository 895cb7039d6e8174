-- Least-privilege PostgreSQL setup for Lethe (docs/postgres.md explains it).
--
-- Two roles: lethe_owner owns the schema and its tables and runs the
-- migrations (`lethe migrate`); lethe_app is the role Lethe runs as. The
-- runtime role may read and write the catalog tables, but may only INSERT
-- and SELECT the audit log, may not TRUNCATE anything, and owns nothing, so
-- it cannot drop or disable the audit log's triggers.
--
-- Run it with psql, one step at a time. Names: database lethe, schema
-- lethe, roles lethe_owner and lethe_app; change them all if you like.
-- internal/catalog/postgres/roles_test.go runs this very file.

-- step 1: as a superuser, connected to any database.
CREATE ROLE lethe_owner LOGIN;
CREATE ROLE lethe_app LOGIN;
CREATE DATABASE lethe OWNER lethe_owner;
REVOKE ALL ON DATABASE lethe FROM PUBLIC;
GRANT CONNECT ON DATABASE lethe TO lethe_app;
ALTER ROLE lethe_owner IN DATABASE lethe SET search_path = lethe;
ALTER ROLE lethe_app IN DATABASE lethe SET search_path = lethe;
-- Set the passwords with psql's \password lethe_owner and \password
-- lethe_app, and give them to Lethe through PGPASSFILE, not the URL.

-- step 2: as lethe_owner, connected to database lethe.
CREATE SCHEMA lethe AUTHORIZATION lethe_owner;
REVOKE ALL ON SCHEMA lethe FROM PUBLIC;
GRANT USAGE ON SCHEMA lethe TO lethe_app;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
-- Tables that later migrations add are usable by lethe_app at once.
ALTER DEFAULT PRIVILEGES FOR ROLE lethe_owner IN SCHEMA lethe
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO lethe_app;

-- step 3: in a shell, migrate as the owner:
--   PGPASSFILE=/etc/lethe/owner.pgpass lethe migrate --store 'postgres://lethe_owner@db.example/lethe'

-- step 4: as lethe_owner, connected to database lethe; again after every
-- `lethe migrate`.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA lethe TO lethe_app;
REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON lethe.audit FROM lethe_app;
REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON lethe.lethe_migrations FROM lethe_app;
