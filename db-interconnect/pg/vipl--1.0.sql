-- pg_stat_vipl: one row per connection of this server's processes that runs through the
-- vipl interposer (libvipl-db.so), from each process's connection table.  A 'kernel' row
-- (a plain client, a fallback) counts only the bytes the interposer read before the
-- connection stayed on the kernel; the kernel carries and counts the rest.
\echo Use "CREATE EXTENSION vipl" to load this file. \quit

CREATE FUNCTION vipl_connections(
    OUT pid integer,        -- the server process (join pg_stat_activity on it)
    OUT fd integer,         -- the descriptor in that process
    OUT role text,          -- server: a client's connection to us; client: ours to another
    OUT transport text,     -- shm, tcp (the vipl providers) or kernel (stayed a socket)
    OUT peer text,          -- the kernel connection's peer address (null when unknown)
    OUT bytes_in bigint,
    OUT bytes_out bigint,
    OUT calls_in bigint,    -- receive and send calls on vipl
    OUT calls_out bigint,
    OUT messages_in bigint, -- vipl messages (published when the process waits)
    OUT messages_out bigint,
    OUT spins bigint,       -- waits that ended while polling
    OUT sleeps bigint)      -- waits that slept
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'vipl_connections'
LANGUAGE C STRICT VOLATILE;

CREATE VIEW pg_stat_vipl AS SELECT * FROM vipl_connections();

-- Peers are as private as pg_stat_activity's client addresses: readers of all statistics.
REVOKE ALL ON FUNCTION vipl_connections() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION vipl_connections() TO pg_read_all_stats;
REVOKE ALL ON pg_stat_vipl FROM PUBLIC;
GRANT SELECT ON pg_stat_vipl TO pg_read_all_stats;
