-- Wakes idle workers at once when a task is handed off, instead of at their next poll: a
-- worker LISTENs on `retry_durable_task`; the payload names the table's schema, since one
-- database may hold several queues.
CREATE FUNCTION retry_durable_task_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('retry_durable_task', TG_TABLE_SCHEMA::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER retry_durable_task_notify AFTER INSERT ON retry_durable_task
    FOR EACH STATEMENT EXECUTE FUNCTION retry_durable_task_notify();
