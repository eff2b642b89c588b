// vipl-run --stat: the table it prints of other processes' interposed connections.
//
// A server and a client, copies of this program started through vipl-run (hidden test
// cases "[.peer]", driven over a channel socket on descriptor vt::kSideFd), hold one
// connection and exchange kMessages echoes of kSize bytes; then both wait on the
// connection in poll (asleep: each has published its stream's counters).  vipl-run --stat of the
// two must print the header's thirteen columns in every row, with what the exchange did:
// the bytes and calls each way, the stream messages one side sent and the other received,
// the sleeps.  Families: a socket file and 127.0.0.1 (the shm provider), and two network
// namespaces (the tcp provider, VIPL_DB_REMOTE naming the server).
#include <catch2/catch.hpp>

#include "netns.h"

#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

namespace {

constexpr int kMessages = 200;
constexpr size_t kSize = 64;
const std::vector<std::string> kColumns = {
    "PID",      "FD",        "ROLE",    "TRANS",    "PEER",  "BYTES_IN", "BYTES_OUT",
    "CALLS_IN", "CALLS_OUT", "MSGS_IN", "MSGS_OUT", "SPINS", "SLEEPS"};

std::vector<std::string> words(const std::string &line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    std::string w;
    while (in >> w) out.push_back(w);
    return out;
}

// ------------------------------------------------------------------- the peers

// "unix PATH" or "tcp ADDRESS PORT" -> the address.
socklen_t address_of(const std::vector<std::string> &w, sockaddr_storage *ss) {
    std::memset(ss, 0, sizeof *ss);
    if (w.at(1) == "unix") {
        auto *un = reinterpret_cast<sockaddr_un *>(ss);
        un->sun_family = AF_UNIX;
        std::strncpy(un->sun_path, w.at(2).c_str(), sizeof un->sun_path - 1);
        return sizeof(sockaddr_un);
    }
    auto *in = reinterpret_cast<sockaddr_in *>(ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(w.size() > 3 ? std::stoi(w[3]) : 0));
    inet_pton(AF_INET, w.at(2).c_str(), &in->sin_addr);
    return sizeof(sockaddr_in);
}

bool io_all(int fd, char *buf, size_t len, bool out) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = out ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
                        : recv(fd, buf + done, len - done, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

// Every wait in a peer is bounded: the test kills what outlives it, and so does this.
void bound_peer() {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(30);
}

} // namespace

TEST_CASE("stat peer server", "[.peer]") {
    bound_peer();
    vt::LineChannel &ch = vt::side_channel();
    std::vector<std::string> w = words(ch.hear(10000).value());
    sockaddr_storage ss;
    socklen_t len = address_of(w, &ss);
    int l = socket(ss.ss_family, SOCK_STREAM, 0);
    REQUIRE(l >= 0);
    REQUIRE(bind(l, reinterpret_cast<sockaddr *>(&ss), len) == 0);
    REQUIRE(listen(l, 1) == 0);
    len = sizeof ss;
    REQUIRE(getsockname(l, reinterpret_cast<sockaddr *>(&ss), &len) == 0);
    int port = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in *>(&ss)->sin_port) : 0;
    ch.say("port " + std::to_string(port));
    int fd = accept(l, nullptr, nullptr);
    REQUIRE(fd >= 0);
    char buf[kSize];
    for (int i = 0; i < kMessages; ++i) {
        REQUIRE(io_all(fd, buf, kSize, false));
        REQUIRE(io_all(fd, buf, kSize, true));
    }
    ch.say("echoed");
    // Asleep on the connection (and the channel) until the test has read the table.
    pollfd p[2] = {{fd, POLLIN, 0}, {vt::kSideFd, POLLIN, 0}};
    REQUIRE(poll(p, 2, 20000) == 1);
    REQUIRE(p[1].revents & POLLIN);
    REQUIRE(ch.hear(1000).value() == "bye");
    char bye = 'b';
    REQUIRE(io_all(fd, &bye, 1, true));
    close(fd);
    close(l);
}

TEST_CASE("stat peer client", "[.peer]") {
    bound_peer();
    vt::LineChannel &ch = vt::side_channel();
    std::vector<std::string> w = words(ch.hear(10000).value());
    sockaddr_storage ss;
    socklen_t len = address_of(w, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr *>(&ss), len) == 0);
    char out[kSize], in[kSize];
    for (int i = 0; i < kMessages; ++i) {
        std::memset(out, 'a' + i % 26, kSize);
        REQUIRE(io_all(fd, out, kSize, true));
        REQUIRE(io_all(fd, in, kSize, false));
        REQUIRE(std::memcmp(in, out, kSize) == 0);
    }
    ch.say("sent");
    // Asleep here while the table is read: in poll, as libpq waits (a waiter publishes its
    // stream's counters when it sleeps in poll, select or epoll).
    pollfd p{fd, POLLIN, 0};
    REQUIRE(poll(&p, 1, 20000) == 1);
    char bye = 0;
    REQUIRE(io_all(fd, &bye, 1, false));
    REQUIRE(bye == 'b');
    ch.say("done");
    close(fd);
}

// ------------------------------------------------------------------- the test

namespace {

// A peer: this program under vipl-run (inside a namespace when one is given).
class Peer {
public:
    Peer(const std::string &role, const std::string &netns, const std::vector<std::string> &env) {
        int sv[2];
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        REQUIRE(n > 0);
        exe[n] = 0;
        std::vector<std::string> args;
        if (!netns.empty()) {
            std::string ip = access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip";
            args = {ip, "netns", "exec", netns};
        }
        args.push_back("/usr/bin/env");
        args.insert(args.end(), env.begin(), env.end());
        args.insert(args.end(), {VIPL_RUN, exe, "stat peer " + role, "-w", "NoTests"});
        std::vector<char *> argv;
        for (std::string &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        fflush(nullptr);
        pid_ = fork();
        REQUIRE(pid_ >= 0);
        if (pid_ == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (dup2(sv[1], vt::kSideFd) < 0) _exit(98);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(sv[1]);
        ch_ = vt::LineChannel(sv[0]);
    }
    ~Peer() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    std::string hear() {
        std::optional<std::string> line = ch_.hear(20000);
        if (!line) FAIL("a peer went silent (pid " << pid_ << ")");
        return *line;
    }
    void say(const std::string &s) { ch_.say(s); }
    int pid() const { return pid_; }
    int wait() {
        int status = vt::reap(pid_, vt::mono_ns() + 10'000'000'000ull);
        pid_ = -1;
        return status;
    }

private:
    int pid_ = -1;
    vt::LineChannel ch_;
};

// Asleep in the kernel, as seen three times in a row (bounded).
bool asleep(int pid) {
    int seen = 0;
    for (int i = 0; i < 500 && seen < 3; ++i) {
        std::string path = "/proc/" + std::to_string(pid) + "/stat";
        FILE *f = fopen(path.c_str(), "re");
        if (!f) return false;
        char buf[512];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *paren = strrchr(buf, ')');
        seen = paren && paren[1] == ' ' && paren[2] == 'S' ? seen + 1 : 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return seen >= 3;
}

using Row = std::map<std::string, std::string>;

uint64_t num(const Row &r, const std::string &col) {
    return std::stoull(r.at(col));
}

void exchange_and_read(const std::string &listen, const std::string &connect, const char *trans,
                       const std::string &server_ns, const std::string &client_ns,
                       const std::vector<std::string> &env) {
    Peer server("server", server_ns, env), client("client", client_ns, env);
    server.say("listen " + listen);
    std::vector<std::string> port = words(server.hear());
    REQUIRE(port.size() == 2);
    REQUIRE(port[0] == "port");
    client.say("connect " + connect + (port[1] == "0" ? "" : " " + port[1]));
    REQUIRE(client.hear() == "sent");
    REQUIRE(server.hear() == "echoed");
    REQUIRE(asleep(server.pid()));
    REQUIRE(asleep(client.pid()));

    std::string out;
    int rc = vt::run_command(
        {VIPL_RUN, "--stat", std::to_string(server.pid()), std::to_string(client.pid())}, &out,
        10000);
    INFO("vipl-run --stat printed:\n" << out);
    REQUIRE(rc == 0);
    std::istringstream lines(out);
    std::string line;
    REQUIRE(std::getline(lines, line));
    REQUIRE(words(line) == kColumns);
    std::map<std::string, Row> by_role;
    while (std::getline(lines, line)) {
        std::vector<std::string> w = words(line);
        REQUIRE(w.size() == kColumns.size());
        Row r;
        for (size_t i = 0; i < w.size(); ++i) r[kColumns[i]] = w[i];
        REQUIRE(by_role.count(r["ROLE"]) == 0);
        by_role[r["ROLE"]] = r;
    }
    REQUIRE(by_role.size() == 2);
    const Row &s = by_role.at("server"), &c = by_role.at("client");
    CHECK(std::stoi(s.at("PID")) == server.pid());
    CHECK(std::stoi(c.at("PID")) == client.pid());
    for (const Row *r : {&s, &c}) {
        CHECK(r->at("TRANS") == trans);
        CHECK(num(*r, "BYTES_IN") == kMessages * kSize);
        CHECK(num(*r, "BYTES_OUT") == kMessages * kSize);
        CHECK(num(*r, "CALLS_OUT") == kMessages);
        CHECK(num(*r, "CALLS_IN") >= kMessages);
        CHECK(num(*r, "SLEEPS") >= 1); // each is asleep on the connection now
    }
    // The server answers on the stream only (its first write waits for it); the client's
    // first bytes may have gone on the kernel connection before the stream was up.
    CHECK(num(s, "MSGS_OUT") >= kMessages);
    CHECK(num(c, "MSGS_OUT") >= kMessages - 1);
    CHECK(num(s, "MSGS_IN") == num(c, "MSGS_OUT"));
    CHECK(num(c, "MSGS_IN") == num(s, "MSGS_OUT"));

    server.say("bye");
    REQUIRE(client.hear() == "done");
    CHECK(server.wait() == 0);
    CHECK(client.wait() == 0);
}

// A fresh directory for the socket file, removed with what is in it however the test ends.
struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/vipl-stat-XXXXXX";
        REQUIRE(mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    ~TempDir() { vt::run_command({"rm", "-rf", path}); }
};

} // namespace

TEST_CASE("vipl-run --stat shows a socket file's connection over shm, every column", "[stat]") {
    TempDir dir;
    std::string path = dir.path + "/s";
    exchange_and_read("unix " + path, "unix " + path, "shm", "", "", {});
}

TEST_CASE("vipl-run --stat shows a TCP loopback connection over shm, every column", "[stat]") {
    exchange_and_read("tcp 127.0.0.1", "tcp 127.0.0.1", "shm", "", "", {});
}

TEST_CASE("vipl-run --stat shows a connection across namespaces over tcp, every column", "[stat]") {
    std::string why = vt::netns_unavailable();
    if (!why.empty()) FAIL("network namespaces: " << why);
    vt::NetnsPair net(&why);
    if (!net.ok()) FAIL("network namespaces: " << why);
    std::string srv = net.address(1);
    exchange_and_read("tcp " + srv, "tcp " + srv, "tcp", net.name(1), net.name(0),
                      {"VIPL_DB_REMOTE=tcp:" + srv + ":*"});
}
