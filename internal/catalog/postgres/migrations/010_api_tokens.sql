-- API bearer tokens (DESIGN §11). Only the SHA-256 of a token's secret is
-- stored (hex); the secret is shown once, when the token is created.
-- Times are Unix nanoseconds; identifiers sort by their bytes (COLLATE "C", as 008).
CREATE TABLE api_tokens (
    name       TEXT COLLATE "C" PRIMARY KEY,
    role       TEXT NOT NULL CHECK (role IN ('viewer', 'operator')),
    hash       TEXT COLLATE "C" NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    -- login: a console login (lethe console url), exchanged once for a
    -- session (used_at set then), never a bearer token.
    login      BOOLEAN NOT NULL DEFAULT FALSE,
    used_at    BIGINT NOT NULL DEFAULT 0
);
