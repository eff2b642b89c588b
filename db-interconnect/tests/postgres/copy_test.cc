// COPY of 100 MB into a table and back out through one psql session (psql's \copy:
// the file's bytes travel as COPY data on the connection), checked by checksum and size,
// with the 100 MB each way counted in the connection tables of psql and its backend.
#include "evidence.h"
#include "psql.h"
#include "workload.h"

#include <catch2/catch.hpp>

using namespace pgt;

TEST_CASE("pg COPY of 100 MB in and out, checksums equal, the bytes counted on the stream",
          "[pg][copy]") {
    PgCluster pg;
    const std::string in = pg.file("in.copy"), out = pg.file("out.copy");
    long rows = write_copy_file(in, 100ull << 20);
    Digest sent = digest_of(in);
    REQUIRE(sent.size >= (100ull << 20));
    write_file(out, "", "postgres", 0644);

    Psql s(pg, pg.tcp_conninfo());
    s.query("CREATE TABLE big(id int, payload text);");
    s.query("\\copy big FROM '" + in + "'", 120000);
    REQUIRE(s.query("SELECT count(*), max(id) FROM big;") ==
            std::to_string(rows) + "|" + std::to_string(rows));
    require_carried(s.pid(), Role::client, Carrier::shm);
    require_carried(s.backend_pid(), Role::server, Carrier::shm);
    const uint64_t after_in = table(s.pid())[0].bytes_out;
    CHECK(after_in >= sent.size);
    CHECK(table(s.backend_pid())[0].bytes_in >= sent.size);

    // Out in the order it went in (the heap keeps no order: COPY fills earlier pages'
    // free space with later short rows), sorted in memory.
    s.query("SET work_mem = '512MB';");
    s.query("\\copy (SELECT * FROM big ORDER BY id) TO '" + out + "'", 120000);
    Digest back = digest_of(out);
    CHECK(back.size == sent.size);
    CHECK(back.fnv == sent.fnv);
    require_carried(s.pid(), Role::client, Carrier::shm);
    CHECK(table(s.pid())[0].bytes_in >= sent.size);
    CHECK(table(s.backend_pid())[0].bytes_out >= sent.size);
    REQUIRE(s.quit() == 0);
}
