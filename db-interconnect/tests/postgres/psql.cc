#include "psql.h"

#include <catch2/catch.hpp>

#include <cstdlib>

namespace pgt {

namespace {

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    while (!s.empty() && (s.front() == '\n' || s.front() == ' ')) s.erase(s.begin());
    return s;
}

} // namespace

std::vector<std::string> psql_argv(const std::string &conninfo, bool tty) {
    std::vector<std::string> a = {"psql", "-X",        "-q", "-A",    "-t", "-v", "ON_ERROR_STOP=0",
                                  "-P",   "pager=off", "-d", conninfo};
    if (tty) {
        // Interactive: no line editing, no prompts, so that output is only what it prints.
        for (const char *v : {"-n", "-v", "PROMPT1=", "-v", "PROMPT2=", "-v", "PROMPT3="})
            a.push_back(v);
    }
    return a;
}

Psql::Psql(const PgCluster &cluster, const std::string &conninfo, const Client &how, bool tty)
    : cluster_(&cluster) {
    Launch l = cluster.client(psql_argv(conninfo, tty), how);
    if (tty) {
        l.tty = true;
    } else {
        l.in_pipe = true;
        l.out_pipe = true;
    }
    command_ = command_text(l);
    prog_ = Program(l);
    refresh_backend_pid();
}

Psql::~Psql() {
    if (prog_.running()) {
        prog_.write_in("\\q\n");
        prog_.close_in();
        if (prog_.wait(2000) < 0) prog_.kill_all();
    }
}

void Psql::send(const std::string &sql) {
    mark_ = prog_.output().size();
    if (!prog_.write_in(sql + "\n")) FAIL("psql stopped reading; it printed:\n" << prog_.output());
}

std::string Psql::query(const std::string &sql, int ms) {
    std::string marker = "@@done " + std::to_string(++seq_) + "@@";
    send(sql + "\n\\echo " + marker);
    size_t at = prog_.read_until(marker + "\n", ms, mark_);
    if (at == std::string::npos) {
        std::string log = cluster_->log();
        if (log.size() > 4000) log = "..." + log.substr(log.size() - 4000);
        FAIL("psql did not finish (" << (prog_.running() ? "still running" : "ended") << ") within "
                                     << ms << " ms: " << sql << "\nit printed:\n"
                                     << prog_.output().substr(mark_) << "\nthe server's log:\n"
                                     << log);
    }
    std::string out = trim(prog_.output().substr(mark_, at - mark_));
    mark_ = at + marker.size() + 1;
    return out;
}

uint64_t Psql::expect(const std::string &needle, int ms) {
    size_t at = prog_.read_until(needle, ms, mark_);
    return at == std::string::npos ? 0 : prog_.arrival_ns(at + needle.size() - 1);
}

bool Psql::saw(const std::string &needle) const {
    return prog_.output().find(needle, mark_) != std::string::npos;
}

std::string Psql::since_send() const {
    return prog_.output().substr(mark_);
}

int Psql::refresh_backend_pid() {
    // Marked: other lines may come first (a reset's report, a library's message).
    std::string out = query("SELECT 'backend=' || pg_backend_pid();");
    size_t at = out.rfind("backend=");
    backend_ = at == std::string::npos ? 0 : std::atoi(out.c_str() + at + 8);
    INFO("$ " << command_ << "\n" << out);
    REQUIRE(backend_ > 0);
    return backend_;
}

int Psql::quit(int ms) {
    prog_.write_in("\\q\n");
    prog_.close_in();
    return prog_.wait(ms);
}

void await_sleeping(PgCluster &pg, int backend) {
    INFO("backend " << backend << " never showed as sleeping");
    REQUIRE(pg.await_sql(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(backend) +
            " AND state = 'active' AND query LIKE 'SELECT pg_sleep%';",
        "1", 10000));
}

Footprint postmaster_baseline(PgCluster &pg) {
    int warm_backend;
    {
        Psql warm(pg, pg.unix_conninfo());
        warm_backend = warm.backend_pid();
    }
    REQUIRE(wait_gone(warm_backend, 5000));
    return footprint(pg.postmaster_pid());
}

} // namespace pgt
