-- A task's result: the serialized output of the attempt that completed it (NULL while it has
-- none: not yet completed, failed, or a handler that returns nothing).
ALTER TABLE retry_durable_task ADD COLUMN output BLOB;
