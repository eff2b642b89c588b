"""What every node's database holds beyond `pgbench -i`: the node's number, the cluster's
connection strings, PL/Proxy's cluster configuration and the functions the scripts call.

Keys: every node holds the pgbench tables of its own partition (accounts 1..100,000 x
scale, its own branches and tellers); a row's global key is (node, aid), the node being
PL/Proxy's partition number.  The nodes start as copies of one template and differ from
the first run on.  pgbench_history gains `anode`: the node whose account the
transaction changed, so the balances summed on node j equal the deltas that name j in
every node's history.
"""
import t2_plan as plan

# Once, in the template (extensions, tables, functions; the connection strings come later).
TEMPLATE_SQL = [
    "CREATE EXTENSION plproxy",
    "CREATE EXTENSION dblink",
    "CREATE EXTENSION pg_prewarm",
    "ALTER TABLE pgbench_history ADD COLUMN anode int",
    "CREATE TABLE t2_self (node int NOT NULL)",
    "INSERT INTO t2_self VALUES (-1)",
    # PL/Proxy's partitions: a power of two of them, partition k = node k (the rows past
    # the last node repeat node 0 and are never chosen: RUN ON takes the node number).
    "CREATE TABLE t2_nodes (part int PRIMARY KEY, connstr text NOT NULL)",
    "CREATE TABLE t2_version (v int NOT NULL)",
    "INSERT INTO t2_version VALUES (1)",
    "CREATE SCHEMA plproxy",
    """CREATE FUNCTION plproxy.get_cluster_partitions(cluster_name text) RETURNS SETOF text
       AS $$ SELECT connstr FROM t2_nodes ORDER BY part $$ LANGUAGE sql""",
    # PL/Proxy asks for the version at every call: PL/pgSQL keeps the plan of its query
    # for the connection (a SQL function would plan its body again at every call).
    """CREATE FUNCTION plproxy.get_cluster_version(cluster_name text) RETURNS int
       AS $$ BEGIN RETURN (SELECT v FROM t2_version); END $$ LANGUAGE plpgsql STABLE""",
    # connection_lifetime 0: a connection lives as long as the backend that opened it.
    """CREATE FUNCTION plproxy.get_cluster_config(IN cluster_name text, OUT key text,
       OUT val text) RETURNS SETOF record
       AS $$ SELECT 'connection_lifetime'::text, '0'::text $$ LANGUAGE sql""",
    # What a peer runs for a remote transaction: its own rows only.  PL/pgSQL, as a DBA
    # writes a peer's functions: the plan of its statement is made once per connection
    # (PL/Proxy's are long-lived), where a SQL function plans its body at every call, about
    # 30 us of the peer's CPU per remote read here, the same on every link.
    """CREATE FUNCTION t2_update_local(p_aid int, p_delta int) RETURNS int AS $$
       DECLARE b int;
       BEGIN
         UPDATE pgbench_accounts SET abalance = abalance + p_delta WHERE aid = p_aid
           RETURNING abalance INTO b;
         RETURN b;
       END $$ LANGUAGE plpgsql""",
    """CREATE FUNCTION t2_balance_local(p_aid int) RETURNS int AS $$
       BEGIN RETURN (SELECT abalance FROM pgbench_accounts WHERE aid = p_aid); END
       $$ LANGUAGE plpgsql STABLE""",
    "CREATE FUNCTION t2_whoami() RETURNS int AS $$ SELECT node FROM t2_self $$ LANGUAGE sql",
    # The PL/Proxy calls: one round trip to the partition named by the node number.
    """CREATE FUNCTION t2_update(node int, p_aid int, p_delta int) RETURNS int AS $$
       CLUSTER 'bench'; RUN ON node; SELECT t2_update_local(p_aid, p_delta);
       $$ LANGUAGE plproxy""",
    """CREATE FUNCTION t2_balance(node int, p_aid int) RETURNS int AS $$
       CLUSTER 'bench'; RUN ON node; SELECT t2_balance_local(p_aid); $$ LANGUAGE plproxy""",
    """CREATE FUNCTION t2_ping(node int) RETURNS int AS $$
       CLUSTER 'bench'; RUN ON node; SELECT 1; $$ LANGUAGE plproxy""",
    """CREATE FUNCTION t2_remote_whoami(node int) RETURNS int AS $$
       CLUSTER 'bench'; RUN ON node; SELECT t2_whoami(); $$ LANGUAGE plproxy""",
    # Two-phase commit through dblink: one named connection per peer and backend.
    """CREATE FUNCTION t2_link(p_node int) RETURNS text AS $$
       DECLARE name text := 'peer' || p_node;
       BEGIN
         IF NOT coalesce(name = ANY (dblink_get_connections()), false) THEN
           PERFORM dblink_connect(name, (SELECT connstr FROM t2_nodes WHERE part = p_node));
         END IF;
         RETURN name;
       END $$ LANGUAGE plpgsql""",
    """CREATE FUNCTION t2_prepare(p_node int, p_aid int, p_delta int) RETURNS text AS $$
       DECLARE
         conn text := t2_link(p_node);
         gid text := format('t2-%s-%s', (SELECT node FROM t2_self), txid_current());
       BEGIN
         PERFORM dblink_exec(conn, 'BEGIN');
         PERFORM dblink_exec(conn, format('UPDATE pgbench_accounts SET abalance = abalance '
                                          '+ %s WHERE aid = %s', p_delta, p_aid));
         PERFORM dblink_exec(conn, format('PREPARE TRANSACTION %L', gid));
         RETURN gid;
       END $$ LANGUAGE plpgsql""",
    """CREATE FUNCTION t2_commit_prepared(p_node int, p_gid text) RETURNS void AS $$
       BEGIN
         PERFORM dblink_exec(t2_link(p_node), format('COMMIT PREPARED %L', p_gid));
       END $$ LANGUAGE plpgsql""",
]


def connstr(host, port):
    return (f"host={host} port={port} dbname={plan.DB_NAME} user={plan.DB_USER} "
            f"application_name={plan.PROXY_APP} sslmode=disable")


def cluster_sql(node, hosts_ports):
    """A node's number and the cluster's connection strings (partition count: a power of
    two >= the nodes)."""
    parts = 1
    while parts < len(hosts_ports):
        parts *= 2
    rows = [connstr(*hosts_ports[k if k < len(hosts_ports) else 0]) for k in range(parts)]
    values = ", ".join(f"({k}, '{c}')" for k, c in enumerate(rows))
    return ["BEGIN", f"UPDATE t2_self SET node = {node}", "DELETE FROM t2_nodes",
            f"INSERT INTO t2_nodes VALUES {values}", "UPDATE t2_version SET v = v + 1",
            "COMMIT"]


# Before every run (after the restart): the small tables vacuumed, the history emptied
# (kept by correctness checks, which sum it), the accounts and their index prewarmed.
def reset_sql(keep_history=False):
    out = [] if keep_history else ["TRUNCATE pgbench_history"]
    out += ["VACUUM pgbench_branches", "VACUUM pgbench_tellers"]
    if keep_history:
        out.append("VACUUM pgbench_history")
    out.append("SELECT pg_prewarm('pgbench_accounts') + pg_prewarm('pgbench_accounts_pkey')"
               " + pg_prewarm('pgbench_branches') + pg_prewarm('pgbench_tellers')")
    return out
