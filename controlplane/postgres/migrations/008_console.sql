-- The web console: passwords, server-side sessions, one-time set-password tokens, member
-- removal, and the personal key fields PostHog's key API shows.

ALTER TABLE users
    -- password_hash is a bcrypt hash; NULL means the user cannot log in to the console.
    ADD COLUMN password_hash text,
    -- removed_at marks a user removed from the organisation: rows they created stay theirs.
    ADD COLUMN removed_at timestamptz;

ALTER TABLE personal_api_keys
    -- mask_value shows the key's ends ("phx_...abcd") so its owner can tell keys apart.
    ADD COLUMN mask_value text,
    ADD COLUMN scoped_organizations text[] NOT NULL DEFAULT '{}';

CREATE TABLE console_sessions (
    -- token_hash is the SHA-256 of the cookie's token; the token itself is never stored.
    token_hash  bytea PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users(id),
    csrf_token  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

CREATE TABLE password_tokens (
    token_hash  bytea PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users(id),
    created_by  bigint REFERENCES users(id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX password_tokens_user ON password_tokens (user_id);
