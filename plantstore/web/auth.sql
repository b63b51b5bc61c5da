-- The token lookup (web/auth.py), run by every authenticated request: a
-- statement, because building and compiling its peewee query cost more than
-- running it (timeit on SQLite: 100 µs to build and compile, 5 µs to run).

-- name: valid_token
-- The caller of a token that is valid now: expiry judged by the database's
-- clock, in the statement. A create on PostgreSQL checks its token the same
-- way inside its own statement (migration 0009).
SELECT t.id AS token_id, t.scopes, u.id AS user_id, u.is_admin FROM token t JOIN "user" u ON u.id = t.user_id
WHERE t.digest = :digest AND t.revoked_at IS NULL
  AND (t.expires_at IS NULL OR t.expires_at > {now})
