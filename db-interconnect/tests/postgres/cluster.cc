#include "cluster.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#ifndef PGT_TEMPLATE_DIR
#define PGT_TEMPLATE_DIR "/tmp/vipl-pg-template"
#endif

namespace pgt {

namespace {

constexpr int kToolMs = 60000;

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.erase(s.begin());
    return s;
}

// initdb once per build: every instance starts as a copy of one data directory that
// initdb made as postgres (initdb costs seconds; a copy a fraction of one).  The lock
// makes concurrent test processes wait for the first one's initdb.
std::string template_dir() {
    if (geteuid() != 0)
        FAIL("these tests run PostgreSQL as the postgres user and clients as others: they need "
             "root");
    if (access("/usr/lib/postgresql/15/bin/initdb", X_OK) != 0)
        FAIL("PostgreSQL 15 is not installed in /usr/lib/postgresql/15 "
             "(scripts/install-deps.sh installs it)");
    const std::string dir = PGT_TEMPLATE_DIR;
    const std::string ready = dir + "/data/PG_VERSION";
    std::filesystem::create_directories(std::filesystem::path(dir).parent_path());
    int lock = open((dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(lock >= 0);
    REQUIRE(flock(lock, LOCK_EX) == 0);
    if (!std::filesystem::exists(ready)) {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
        REQUIRE(mkdir(dir.c_str(), 0755) == 0);
        give_to(dir, "postgres");
        Launch l;
        l.argv = {"initdb",   "-D",           dir + "/data",      "-U",
                  "postgres", "--auth=trust", "--no-sync",        "--locale=C",
                  "-E",       "UTF8",         "--no-instructions"};
        l.user = "postgres";
        run_ok(l, kToolMs);
    }
    close(lock);
    return dir + "/data";
}

} // namespace

PgCluster::PgCluster(ClusterConfig c) : cfg_(std::move(c)) {
    port_ = free_port();
    host_ = cfg_.listen.substr(0, cfg_.listen.find(','));
    make_data();
    write_config();
    if (cfg_.start) start();
}

PgCluster::~PgCluster() {
    // Nothing may escape a destructor (a failed check throws): what fails here is killed.
    try {
        int pm = postmaster_pid();
        if (pm > 0) {
            int st = 0;
            run(tool({"pg_ctl", "-D", data_dir(), "-m", "immediate", "-t", "10", "stop"}), 15000,
                &st);
        }
        if (pm > 0 || pm_pid_ > 0) reap_postmaster(10000);
    } catch (...) {
        if (pm_pid_ > 0) kill(pm_pid_, SIGKILL);
    }
}

void PgCluster::reap_postmaster(int ms) {
    int pm = pm_pid_ > 0 ? pm_pid_ : postmaster_pid();
    if (pm <= 0) return;
    if (!wait_gone(pm, ms)) {
        for (int p : descendants(pm)) kill(p, SIGKILL);
        kill(pm, SIGKILL);
        wait_gone(pm, 5000);
    }
    // Backends of a postmaster killed outright end on its death: wait for them too.
    for (int p : descendants(pm)) wait_gone(p, 2000);
    unregister_pid(pm);
    pm_pid_ = -1;
}

Launch PgCluster::tool(const std::vector<std::string> &argv, bool vipl) const {
    Launch l;
    l.argv = argv;
    l.user = "postgres";
    l.netns = cfg_.netns;
    l.vipl = vipl;
    l.cwd = scratch_.path();
    return l;
}

Launch PgCluster::client(const std::vector<std::string> &argv, const Client &c) const {
    Launch l;
    l.argv = argv;
    l.user = c.user;
    l.netns = c.netns.empty() ? cfg_.netns : c.netns;
    l.vipl = c.vipl;
    l.env = c.env;
    l.nofile = c.nofile;
    l.cwd = "/tmp";
    return l;
}

void PgCluster::make_data() {
    REQUIRE(mkdir(socket_dir().c_str(), 0755) == 0);
    give_to(socket_dir(), "postgres");
    if (!cfg_.base_backup_of.empty()) {
        Launch l = tool({"pg_basebackup", "-D", data_dir(), "-d", cfg_.base_backup_of, "-X",
                         "stream", "--no-sync", "-c", "fast"},
                        cfg_.vipl);
        l.env = cfg_.env;
        l.out_pipe = true;
        Program p(l);
        backup_seen_ = watch(p, kToolMs);
        int st = p.wait(1000);
        INFO("$ " << command_text(l) << "\n" << p.output());
        REQUIRE(st == 0);
        write_file(data_dir() + "/standby.signal", "", "postgres", 0600);
        return;
    }
    run_ok(tool({"cp", "-a", template_dir(), data_dir()}), kToolMs);
}

void PgCluster::write_config() {
    std::string conf = "# written by the PostgreSQL tests of the interconnect\n"
                       "port = " +
                       std::to_string(port_) +
                       "\n"
                       "listen_addresses = '" +
                       cfg_.listen +
                       "'\n"
                       "unix_socket_directories = '" +
                       socket_dir() +
                       "'\n"
                       "max_connections = 40\n"
                       "shared_buffers = 32MB\n"
                       "fsync = off\n"
                       "synchronous_commit = off\n"
                       "full_page_writes = off\n"
                       "autovacuum = off\n"
                       "wal_level = replica\n"
                       "max_wal_senders = 4\n"
                       "logging_collector = off\n"
                       "log_line_prefix = '%m [%p] '\n"
                       "log_connections = on\n"
                       "log_disconnections = on\n"
                       "dynamic_shared_memory_type = posix\n";
    if (cfg_.ssl) {
        run_ok(tool({"openssl", "req", "-new", "-x509", "-days", "2", "-nodes", "-subj",
                     "/CN=localhost", "-newkey", "rsa:2048", "-keyout", data_dir() + "/server.key",
                     "-out", data_dir() + "/server.crt"}),
               kToolMs);
        chmod((data_dir() + "/server.key").c_str(), 0600);
        conf += "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n";
    }
    for (const std::string &line : cfg_.conf) conf += line + "\n";
    write_file(data_dir() + "/postgresql.conf", conf, "postgres", 0600);
    write_file(data_dir() + "/postgresql.auto.conf", "", "postgres", 0600);

    std::string hba;
    if (cfg_.hba.empty()) {
        hba = "local all all trust\n"
              "host all all 127.0.0.1/32 trust\n"
              "host all all ::1/128 trust\n"
              "host all all 10.0.0.0/8 trust\n"
              "local replication all trust\n"
              "host replication all 127.0.0.1/32 trust\n"
              "host replication all 10.0.0.0/8 trust\n";
    } else {
        for (const std::string &line : cfg_.hba) hba += line + "\n";
    }
    write_file(data_dir() + "/pg_hba.conf", hba, "postgres", 0600);
}

// pg_ctl start and restart launch the postmaster itself, so they run with the server's
// interposer, environment and descriptor limit; a failure shows the server log, where
// the postmaster says why it did not come up.
void PgCluster::run_server_ctl(const std::vector<std::string> &argv) {
    Launch l = tool(argv, cfg_.vipl);
    l.env = cfg_.env;
    l.nofile = cfg_.nofile;
    int st = 0;
    std::string out = run(l, 70000, &st);
    INFO("$ " << command_text(l) << "\n" << out << "\nserver log:\n" << log());
    REQUIRE(st == 0);
}

void PgCluster::start() {
    run_server_ctl({"pg_ctl", "-D", data_dir(), "-l", file("log"), "-w", "-t", "60", "start"});
    pm_pid_ = postmaster_pid();
    REQUIRE(pm_pid_ > 0);
    register_pid(pm_pid_, false);
}

void PgCluster::stop(const std::string &mode) {
    run_ok(tool({"pg_ctl", "-D", data_dir(), "-m", mode, "-w", "-t", "30", "stop"}), 40000);
    reap_postmaster(10000);
}

void PgCluster::restart() {
    int old = pm_pid_;
    run_server_ctl(
        {"pg_ctl", "-D", data_dir(), "-l", file("log"), "-m", "fast", "-w", "-t", "60", "restart"});
    if (old > 0) {
        wait_gone(old, 5000);
        unregister_pid(old);
    }
    pm_pid_ = postmaster_pid();
    REQUIRE(pm_pid_ > 0);
    REQUIRE(pm_pid_ != old);
    register_pid(pm_pid_, false);
}

std::string PgCluster::tcp_conninfo(const std::string &user, const std::string &db) const {
    return "host=" + host_ + " port=" + std::to_string(port_) + " user=" + user + " dbname=" + db;
}

std::string PgCluster::unix_conninfo(const std::string &user, const std::string &db) const {
    return "host=" + socket_dir() + " port=" + std::to_string(port_) + " user=" + user +
           " dbname=" + db;
}

int PgCluster::postmaster_pid() const {
    std::ifstream f(data_dir() + "/postmaster.pid");
    int pid = -1;
    if (!(f >> pid) || pid <= 1 || !alive(pid)) return -1;
    return pid;
}

std::string PgCluster::log() const {
    return read_file(file("log"));
}

std::string PgCluster::sql(const std::string &query, const std::string &db) {
    Client c;
    c.vipl = false;
    Launch l = client({"psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d",
                       unix_conninfo("postgres", db), "-c", query},
                      c);
    int st = 0;
    std::string out = run(l, kToolMs, &st);
    INFO("$ " << command_text(l) << "\n" << out);
    REQUIRE(st == 0);
    return trim(out);
}

bool PgCluster::await_sql(const std::string &query, const std::string &want, int ms,
                          const std::string &db) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    Client c;
    c.vipl = false;
    for (;;) {
        int st = 0;
        std::string out = run(client({"psql", "-X", "-q", "-A", "-t", "-d",
                                      unix_conninfo("postgres", db), "-c", query},
                                     c),
                              10000, &st);
        if (st == 0 && trim(out) == want) return true;
        if (now_ns() > deadline) return false;
        sleep_ms(50);
    }
}

} // namespace pgt
