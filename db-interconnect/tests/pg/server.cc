#include "server.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace pgt {

namespace {

Command as_postgres(std::vector<std::string> argv, const ServerOptions &o, bool vipl) {
    Command c;
    if (vipl) argv.insert(argv.begin(), vipl_run());
    c.argv = std::move(argv);
    c.user = "postgres";
    c.netns = o.netns;
    if (vipl) c.env = vipl_env();
    c.env.insert(c.env.end(), o.env.begin(), o.env.end());
    return c;
}

} // namespace

Server::Server(const ServerOptions &o) : o_(o) {
    port_ = free_port();
    std::string dir = dir_.path();
    Result r = run(as_postgres({pg_bin("initdb"), "-A", "trust", "-N", "-E", "UTF8", "--locale=C",
                                "-D", data_dir()},
                               o_, false),
                   120000);
    INFO(r.out);
    REQUIRE(r.status == 0);
    std::string conf = read_text(data_dir() + "/postgresql.conf");
    conf += "port = " + std::to_string(port_) + "\nunix_socket_directories = '" + dir +
            "'\nlisten_addresses = '" + o_.listen +
            "'\nfsync = off\nmax_connections = 20\nshared_buffers = 16MB\n";
    write_text(data_dir() + "/postgresql.conf", conf);
    if (!o_.listen.empty())
        write_text(data_dir() + "/pg_hba.conf",
                   read_text(data_dir() + "/pg_hba.conf") + "host all all 0.0.0.0/0 trust\n");
    r = run(as_postgres({pg_bin("pg_ctl"), "-D", data_dir(), "-l", dir + "/log", "-w", "-t", "120",
                         "start"},
                        o_, o_.vipl),
            150000);
    running_ = true;
    if (r.status != 0) halt(); // a server that started half way must not outlive its directory
    INFO(r.out << log());
    REQUIRE(r.status == 0);
}

void Server::stop() {
    if (!running_) return;
    running_ = false;
    Result r = run(
        as_postgres({pg_bin("pg_ctl"), "-D", data_dir(), "-m", "fast", "-w", "-t", "60", "stop"},
                    o_, false),
        90000);
    INFO(r.out << log());
    REQUIRE(r.status == 0);
}

Server::~Server() {
    halt();
}

void Server::halt() {
    if (!running_) return;
    running_ = false;
    Result r = run(as_postgres({pg_bin("pg_ctl"), "-D", data_dir(), "-m", "immediate", "-w", "-t",
                                "30", "stop"},
                               o_, false),
                   45000);
    if (r.status != 0) {
        // The server must not outlive its directory: end it by its pid file.
        int pm = std::atoi(read_text(data_dir() + "/postmaster.pid").c_str());
        if (pm > 0) kill(pm, SIGKILL);
    }
}

Psql::Psql(int port, const Options &o) {
    Command c;
    if (o.vipl) c.argv.push_back(vipl_run());
    for (std::string a :
         {pg_bin("psql"), std::string("-X"), std::string("-q"), std::string("-A"),
          std::string("-t"), "-h" + o.host, "-p" + std::to_string(port), std::string("-dpostgres")})
        c.argv.push_back(a);
    c.user = "postgres";
    c.netns = o.netns;
    if (o.vipl) c.env = vipl_env();
    c.env.insert(c.env.end(), o.env.begin(), o.env.end());
    log_ = o.log;
    pid_ = spawn(c, &to_, &from_);
    signal(SIGPIPE, SIG_IGN); // a session that died must fail the test, not end it
    std::string pid = value("SELECT pg_backend_pid()");
    backend_pid_ = std::atoi(pid.c_str());
    REQUIRE(backend_pid_ > 0);
}

Psql::~Psql() {
    if (to_ >= 0) close(to_); // end of input: psql quits
    if (pid_ > 0) reap(pid_, 10000);
    if (from_ >= 0) close(from_);
}

std::vector<std::string> Psql::query(const std::string &sql) {
    const std::string end = "@@vipl-test-end@@";
    std::string in = sql + ";\n\\echo " + end + "\n";
    REQUIRE(write(to_, in.data(), in.size()) == static_cast<ssize_t>(in.size()));
    using clock = std::chrono::steady_clock;
    auto deadline = clock::now() + std::chrono::seconds(30);
    std::vector<std::string> out;
    for (;;) {
        size_t nl = buf_.find('\n');
        if (nl != std::string::npos) {
            std::string line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            if (line == end) return out;
            out.push_back(line);
            continue;
        }
        // What the test shows when the session fails.
        auto context = [&] {
            std::string t = "psql: " + sql + "\nits output so far:\n";
            for (const std::string &l : out) t += l + "\n";
            return t + buf_ + "\nserver log:\n" + (log_.empty() ? "" : read_text(log_));
        };
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
        if (left.count() <= 0) FAIL("no answer within 30 s\n" << context());
        pollfd p{from_, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
        char b[4096];
        ssize_t n = read(from_, b, sizeof b);
        if (n <= 0) {
            int st = 0;
            waitpid(pid_, &st, 0);
            pid_ = -1;
            FAIL("psql ended early (" << (WIFEXITED(st) ? "exit code " : "signal ")
                                      << (WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st)) << ")\n"
                                      << context());
        }
        buf_.append(b, static_cast<size_t>(n));
    }
}

std::string Psql::value(const std::string &sql) {
    std::vector<std::string> v = query(sql);
    INFO(sql);
    REQUIRE(v.size() == 1);
    return v[0];
}

ServerOptions netns_server(const vt::NetnsPair &net) {
    ServerOptions o;
    o.netns = net.path(0);
    o.listen = net.address(0);
    o.env = {"VIPL_DB_REMOTE=tcp:" + net.address(0) + ":*"};
    return o;
}

Psql::Options netns_session(const vt::NetnsPair &net) {
    Psql::Options o;
    o.host = net.address(0);
    o.netns = net.path(1);
    // libpq's default sslmode=prefer: over TCP its first message is an SSLRequest, which
    // the backend answers before the client's stream is up.
    o.env = {"VIPL_DB_REMOTE=tcp:" + net.address(0) + ":*"};
    return o;
}

namespace {

// The pair, once required to be up (the server needs its namespaces).
const vt::NetnsPair &made(const vt::NetnsPair &net, const std::string &why) {
    INFO(why);
    REQUIRE(net.ok());
    return net;
}

} // namespace

NetnsSession::NetnsSession()
    : net(&why_), server(netns_server(made(net, why_))), psql(server, netns_session(net)) {}

} // namespace pgt
