// vipl-pg enable and disable against a cluster directory under a temporary conf root:
// the environment file as pg_ctlcluster reads it (PgCommon's own reader, run with perl),
// byte-for-byte round trips, idempotence, refusals.
#include "harness.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

using namespace pgt;

namespace {

// A conf root with cluster 15/<name> whose environment file holds `text`.
struct FakeCluster {
    TempDir root;
    std::string name = "testc";
    explicit FakeCluster(const std::string &text, bool with_file = true) {
        std::string dir = root.path() + "/15";
        REQUIRE(mkdir(dir.c_str(), 0755) == 0);
        REQUIRE(mkdir((dir + "/" + name).c_str(), 0755) == 0);
        if (with_file) write_text(file(), text);
    }
    std::string file() const { return root.path() + "/15/" + name + "/environment"; }
    Result tool(const std::string &command, const char *user = nullptr) const {
        Command c;
        c.argv = {vipl_pg(), command, "15", name, "--conf-root", root.path()};
        c.user = user;
        return run(c);
    }
};

// What pg_ctlcluster puts in the server's environment as LD_PRELOAD: PgCommon's reader.
// "<none>" when unset, "<refused>" when the reader rejects the file.
std::string preload_as_pg_ctlcluster_reads(const std::string &file) {
    Command c;
    c.argv = {"/usr/bin/perl", "-e",
              "use PgCommon; my %c = PgCommon::read_conf_file($ARGV[0]); "
              "print $c{LD_PRELOAD} // '<none>'",
              file};
    Result r = run(c);
    return r.status == 0 ? r.out : "<refused>";
}

std::string real_library() {
    char buf[PATH_MAX];
    REQUIRE(realpath(library().c_str(), buf) != nullptr);
    return buf;
}

const std::string kDebianDefault =
    "# environment variables for postgres processes\n"
    "# This file has the same syntax as postgresql.conf:\n"
    "#  VARIABLE = simple_value\n"
    "#  VARIABLE2 = 'any value!'\n"
    "# I. e. you need to enclose any value which does not only consist of letters,\n"
    "# numbers, and '-', '_', '.' in single quotes. Shell commands are not\n"
    "# evaluated.\n";

// enable, enable again, disable, disable again: the file as pg_ctlcluster reads it at
// each step, and its bytes at the end.
void round_trip(const std::string &original, const std::string &preload_before) {
    INFO("original file:\n" << original);
    FakeCluster fc(original);
    REQUIRE(preload_as_pg_ctlcluster_reads(fc.file()) == preload_before);
    std::string lib = real_library();

    Result r = fc.tool("enable");
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("+ LD_PRELOAD = '" + lib) != std::string::npos);
    CHECK(r.out.find("takes effect at the next start") != std::string::npos);
    // The scheduler's autogroups are named only when on (clients sharing the server's CPU
    // then sleep instead of handing it over).
    CHECK((r.out.find("scheduler: autogroups on: ") != std::string::npos) ==
          (autogroups_setting() == "1"));
    std::string want = preload_before == "<none>" ? lib : lib + ":" + preload_before;
    CHECK(preload_as_pg_ctlcluster_reads(fc.file()) == want);
    std::string enabled = read_text(fc.file());

    Result again = fc.tool("enable");
    INFO(again.out);
    CHECK(again.status == 0);
    CHECK(again.out.find("already enabled") != std::string::npos);
    CHECK(read_text(fc.file()) == enabled);

    Result off = fc.tool("disable");
    INFO(off.out);
    CHECK(off.status == 0);
    CHECK(off.out.find("disabled") != std::string::npos);
    CHECK(read_text(fc.file()) == original);
    CHECK(preload_as_pg_ctlcluster_reads(fc.file()) == preload_before);

    Result off2 = fc.tool("disable");
    INFO(off2.out);
    CHECK(off2.status == 0);
    CHECK(off2.out.find("not enabled") != std::string::npos);
    CHECK(read_text(fc.file()) == original);
}

} // namespace

TEST_CASE("vipl-pg enable and disable: a file without LD_PRELOAD comes back byte for byte") {
    round_trip(kDebianDefault, "<none>");
}

TEST_CASE("vipl-pg enable and disable: an LD_PRELOAD line keeps its entries and comes back") {
    round_trip(kDebianDefault + "TZ = 'UTC'\nLD_PRELOAD = '/usr/lib/libjemalloc.so.2'  # alloc\n"
                                "PGTZ = UTC\n",
               "/usr/lib/libjemalloc.so.2");
}

TEST_CASE("vipl-pg enable and disable: unusual files come back byte for byte") {
    struct Case {
        const char *what, *text, *preload;
    };
    const Case cases[] = {
        {"empty", "", "<none>"},
        {"no final line break", "# env\nTZ = 'UTC'", "<none>"},
        {"LD_PRELOAD last, no final line break", "TZ = UTC\nLD_PRELOAD = '/a/x.so'", "/a/x.so"},
        {"two LD_PRELOAD lines: the last counts",
         "LD_PRELOAD = '/a/one.so'\n\nLD_PRELOAD='/b/two.so'\n", "/b/two.so"},
        {"blank separator, simple value", "  LD_PRELOAD\tlibfoo.so\n", "libfoo.so"},
        {"quotes and blanks in the value", "LD_PRELOAD = '/a b/it''s.so /c.so' # two\n",
         "/a b/it's.so /c.so"},
        {"CRLF line ends", "# dos\r\nTZ = 'UTC'\r\n", "<none>"},
    };
    for (const Case &c : cases) {
        INFO(c.what);
        round_trip(c.text, c.preload);
    }
}

TEST_CASE("vipl-pg disable keeps lines added after enable, and the file's owner and mode") {
    FakeCluster fc(kDebianDefault);
    Account pg = account("postgres");
    REQUIRE(chown(fc.file().c_str(), pg.uid, pg.gid) == 0);
    REQUIRE(chmod(fc.file().c_str(), 0640) == 0);
    REQUIRE(fc.tool("enable").status == 0);
    struct stat st;
    REQUIRE(stat(fc.file().c_str(), &st) == 0);
    CHECK(st.st_uid == pg.uid);
    CHECK(st.st_gid == pg.gid);
    CHECK((st.st_mode & 07777) == 0640);
    write_text(fc.file(), read_text(fc.file()) + "TZ = 'UTC'\n");
    Result r = fc.tool("disable");
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(read_text(fc.file()) == kDebianDefault + "TZ = 'UTC'\n");
    REQUIRE(stat(fc.file().c_str(), &st) == 0);
    CHECK(st.st_uid == pg.uid);
    CHECK((st.st_mode & 07777) == 0640);
}

TEST_CASE("vipl-pg enable leaves an LD_PRELOAD that names the interposer by hand alone") {
    std::string text = "LD_PRELOAD = '/opt/x/lib/libvipl-db.so'\n";
    FakeCluster fc(text);
    Result r = fc.tool("enable");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("set by hand") != std::string::npos);
    CHECK(read_text(fc.file()) == text);
    Result d = fc.tool("disable");
    INFO(d.out);
    CHECK(d.status == 0);
    CHECK(d.out.find("remove it by hand") != std::string::npos);
    CHECK(read_text(fc.file()) == text);
}

TEST_CASE("vipl-pg refuses, with exit status 2 and a sentence") {
    SECTION("no such cluster directory") {
        FakeCluster fc(kDebianDefault);
        Command c;
        c.argv = {vipl_pg(), "enable", "15", "nosuch", "--conf-root", fc.root.path()};
        Result r = run(c);
        INFO(r.out);
        CHECK(r.status == 2);
        CHECK(r.out.find("no cluster 15/nosuch") != std::string::npos);
    }
    SECTION("no environment file") {
        FakeCluster fc("", false);
        for (const char *cmd : {"enable", "disable"}) {
            Result r = fc.tool(cmd);
            INFO(cmd << ": " << r.out);
            CHECK(r.status == 2);
            CHECK(r.out.find("does not exist") != std::string::npos);
        }
    }
    SECTION("a file this user cannot write") {
        FakeCluster fc(kDebianDefault); // root's, 0644, in root's 0755 directory
        REQUIRE(chmod(fc.root.path().c_str(), 0755) == 0);
        for (const char *cmd : {"enable", "disable"}) {
            Result r = fc.tool(cmd, "nobody");
            INFO(cmd << ": " << r.out);
            CHECK(r.status == 2);
            CHECK(r.out.find("cannot write " + fc.file()) != std::string::npos);
        }
        CHECK(read_text(fc.file()) == kDebianDefault);
    }
    SECTION("an LD_PRELOAD line pg_ctlcluster would refuse too") {
        std::string bad = "LD_PRELOAD = /usr/lib/x.so\n";
        FakeCluster fc(bad);
        REQUIRE(preload_as_pg_ctlcluster_reads(fc.file()) == "<refused>");
        Result r = fc.tool("enable");
        INFO(r.out);
        CHECK(r.status == 2);
        CHECK(r.out.find("does not read") != std::string::npos);
        CHECK(read_text(fc.file()) == bad);
    }
    SECTION("usage") {
        for (std::vector<std::string> args : {std::vector<std::string>{},
                                              {"start", "15", "main"},
                                              {"enable", "15"},
                                              {"enable", "15", "../main"},
                                              {"disable", "-D", "/tmp"},
                                              {"status", "-x"}}) {
            Command c;
            c.argv = {vipl_pg()};
            c.argv.insert(c.argv.end(), args.begin(), args.end());
            Result r = run(c);
            INFO(r.out);
            CHECK(r.status == 2);
            CHECK(r.out.rfind("vipl-pg: ", 0) == 0);
        }
    }
}

TEST_CASE("vipl-pg status of a cluster whose server is not running exits 1") {
    FakeCluster fc(kDebianDefault);
    TempDir data;
    write_text(fc.root.path() + "/15/" + fc.name + "/postgresql.conf",
               "data_directory = '" + data.path() + "'\t\t# use data in another directory\n");
    REQUIRE(fc.tool("enable").status == 0);
    Result r = fc.tool("status");
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("enables it (LD_PRELOAD names " + real_library()) != std::string::npos);
    CHECK(r.out.find("server " + data.path() + ": not running") != std::string::npos);
    // A stale pid file names a process that is not this data directory's server.
    write_text(data.path() + "/postmaster.pid", std::to_string(getpid()) + "\n");
    r = fc.tool("status");
    INFO(r.out);
    CHECK(r.status == 1);
    CHECK(r.out.find("a stale file") != std::string::npos);
}

TEST_CASE("vipl-pg enable points its own line at this library, and disable still restores") {
    std::string original = "TZ = 'UTC'\nLD_PRELOAD = '/usr/lib/libjemalloc.so.2'\n";
    FakeCluster fc(original);
    REQUIRE(fc.tool("enable").status == 0);
    // The same file as enabled by an installation elsewhere.
    std::string lib = real_library(), text = read_text(fc.file());
    size_t at = text.find(lib);
    REQUIRE(at != std::string::npos);
    write_text(fc.file(), text.replace(at, lib.size(), "/opt/old/lib/libvipl-db.so"));
    Result r = fc.tool("enable");
    INFO(r.out);
    CHECK(r.status == 0);
    CHECK(r.out.find("instead of /opt/old/lib/libvipl-db.so") != std::string::npos);
    CHECK(preload_as_pg_ctlcluster_reads(fc.file()) == lib + ":/usr/lib/libjemalloc.so.2");
    REQUIRE(fc.tool("disable").status == 0);
    CHECK(read_text(fc.file()) == original);
}
