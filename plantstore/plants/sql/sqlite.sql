-- A create's plant on SQLite (plants/create.py); its deliveries are the
-- webhook store's (webhooks/engine/store/sqlite.py), in the same transaction.

-- name: insert_plant
INSERT INTO plant (id, owner_id, name, tag, created_at)
VALUES (:id, :owner, :name, :tag, :now)
