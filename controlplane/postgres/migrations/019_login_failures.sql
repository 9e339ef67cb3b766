-- Failed console logins per client address and per email, counted by every control-plane
-- replica together (controlplane/loginlimit): each replica counting alone let a load balancer
-- multiply a guesser's tries by the number of replicas.
--
-- key is the first 8 bytes of the SHA-256 of "address" or "email", a NUL and the value (the
-- email trimmed and lower-cased), never the value itself. A failure counts in the window it
-- falls in (--login-failure-window long, starting at multiples of it); a window's count is read
-- while the window is the current or the previous one, and deleted by later failures, a few
-- rows each. Unlogged: these are counts of minutes, not worth the WAL a login flood would
-- write; a crash of PostgreSQL or a fail-over forgets them, as a replica's restart forgets its
-- own counts in memory.
CREATE UNLOGGED TABLE login_failures (
    key          bigint NOT NULL,
    window_start timestamptz NOT NULL,
    failures     integer NOT NULL,
    PRIMARY KEY (key, window_start)
);
-- The expired windows, for their deletion.
CREATE INDEX login_failures_window ON login_failures (window_start);
