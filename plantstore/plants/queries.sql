-- The plant routes' hot statements (plants/queries.py): keyset pages of the
-- plants a caller may see, one statement per shape (own plants or all of
-- them, first page or after a cursor), so a list costs one index range scan
-- and no query building. Each reads (id, name, tag) rows ordered by id,
-- through the (owner_id, id) index for a user and the primary key for an admin.

-- name: own_first
SELECT id, name, tag FROM plant WHERE owner_id = :owner ORDER BY id LIMIT :limit

-- name: own_after
SELECT id, name, tag FROM plant WHERE owner_id = :owner AND id > :after ORDER BY id LIMIT :limit

-- name: all_first
SELECT id, name, tag FROM plant ORDER BY id LIMIT :limit

-- name: all_after
SELECT id, name, tag FROM plant WHERE id > :after ORDER BY id LIMIT :limit
