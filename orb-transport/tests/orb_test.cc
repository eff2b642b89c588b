// The transport with real omniORB programs: an echo server and client (omniidl-compiled),
// started as processes, every wait bounded.
#include <catch2/catch.hpp>

#include "vipl/stream_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Args = std::vector<std::string>;
const std::string kBin = ORB_BIN_DIR;

struct Proc {
    pid_t pid = -1;
    int out = -1; // its stdout
    int in = -1;  // its stdin
    std::string buffered;

    Proc() = default;
    Proc(const Proc &) = delete;
    ~Proc() {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        if (out >= 0) close(out);
        if (in >= 0) close(in);
    }

    // Reads a line of its output, waiting at most timeout_ms; "" on timeout or end.
    std::string line(int timeout_ms) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        for (;;) {
            auto nl = buffered.find('\n');
            if (nl != std::string::npos) {
                std::string l = buffered.substr(0, nl);
                buffered.erase(0, nl + 1);
                return l;
            }
            int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            end - std::chrono::steady_clock::now())
                                            .count());
            if (left <= 0) return "";
            pollfd p{out, POLLIN, 0};
            if (poll(&p, 1, left) <= 0) return "";
            char buf[4096];
            ssize_t n = read(out, buf, sizeof buf);
            if (n <= 0) return "";
            buffered.append(buf, n);
        }
    }

    // Everything it writes until it exits (at most timeout_ms).
    std::string rest(int timeout_ms) {
        std::string all = buffered;
        buffered.clear();
        for (std::string l; !(l = line(timeout_ms)).empty() || !buffered.empty();) all += l + "\n";
        return all;
    }

    // Its exit code (128+signal), or -1 after killing it at the timeout.
    int wait(int timeout_ms) {
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        int st;
        while (std::chrono::steady_clock::now() < end) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            if (r == pid) {
                pid = -1;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        pid = -1;
        return -1;
    }
};

// stderr: also into p.out (omniORB's log), or left as the test's own.
void spawn(Proc &p, const std::string &prog, const Args &args, bool preload = false,
           bool with_stderr = false) {
    int o[2], i[2];
    REQUIRE(pipe2(o, O_CLOEXEC) == 0);
    REQUIRE(pipe2(i, O_CLOEXEC) == 0);
    std::vector<std::string> all{kBin + "/" + prog};
    all.insert(all.end(), args.begin(), args.end());
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(o[1], 1);
        if (with_stderr) dup2(o[1], 2);
        dup2(i[0], 0);
        if (preload) setenv("LD_PRELOAD", ORB_PLUGIN, 1);
        setenv("OMNIORB_CONFIG", "/dev/null", 1);
        setenv("ORBgiopMaxMsgSize", "33554432", 1); // the 16 MiB echo
        std::vector<char *> argv;
        for (auto &a : all) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
    }
    close(o[1]);
    close(i[0]);
    p.pid = pid;
    p.out = o[0];
    p.in = i[1];
}

// Starts a server and returns its IOR.
std::string start_server(Proc &p, const Args &orb_args, const std::string &prog = "orb-echo-server",
                         bool preload = false) {
    spawn(p, prog, orb_args, preload);
    std::string ior = p.line(15000);
    REQUIRE(ior.rfind("IOR:", 0) == 0);
    return ior;
}

// A TCP port of 127.0.0.1 that nothing is bound to now (the kernel's choice for port 0).
int free_tcp_port() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int port = -1;
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &l) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    REQUIRE(port > 0);
    return port;
}

struct Result {
    int code;
    std::string out;
};

Result run_client(const std::string &ior, const Args &args, const Args &orb_args = {},
                  const std::string &prog = "orb-echo-client", bool preload = false,
                  int timeout_ms = 60000) {
    Proc c;
    Args all{ior};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(all.end(), orb_args.begin(), orb_args.end());
    spawn(c, prog, all, preload);
    std::string out = c.rest(timeout_ms);
    int code = c.wait(5000);
    UNSCOPED_INFO("client " << args[0] << " exit " << code << ":\n" << out);
    return {code, out};
}

bool contains(const std::string &s, const std::string &what) {
    return s.find(what) != std::string::npos;
}

long long value(const std::string &out, const std::string &key) {
    auto at = out.find(key + "=");
    if (at == std::string::npos) return -2;
    return std::stoll(out.substr(at + key.size() + 1));
}

const Args kBoth = {"-ORBendPoint", "giop:vipl::0", "-ORBendPoint", "giop:tcp:127.0.0.1:0"};
const Args kPool = {"-ORBthreadPerConnectionPolicy", "0"};

Args operator+(Args a, const Args &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Threads of a process (/proc/<pid>/task).
int threads_of(pid_t pid) {
    int n = 0;
    if (DIR *d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str())) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n;
}

// Its thread count once it has not changed for 300 ms (at most 5 s).
int settled_threads(pid_t pid) {
    int last = threads_of(pid), same = 0;
    for (int i = 0; i < 100 && same < 6; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        int now = threads_of(pid);
        same = now == last ? same + 1 : 0;
        last = now;
    }
    return last;
}

long long server_accepted(const std::string &ior) {
    auto r = run_client(ior, {"server-accepted"}, {"-ORBclientTransportRule", "* tcp"});
    REQUIRE(r.code == 0);
    return value(r.out, "server_accepted");
}

} // namespace

TEST_CASE("null call and 1 KiB 64 KiB 16 MiB payloads over vipl in thread-per-connection mode") {
    Proc s;
    std::string ior = start_server(s, kBoth);
    auto r = run_client(ior, {"sizes"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") >= 1);
    CHECK(server_accepted(ior) >= 1);
}

TEST_CASE("payloads and concurrent calls in thread-pool mode") {
    Proc s;
    std::string ior = start_server(s, kBoth + kPool);
    auto r = run_client(ior, {"sizes"});
    CHECK(r.code == 0);
    r = run_client(ior, {"concurrent", "8", "200"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") >= 1);
}

TEST_CASE("concurrent clients in both threading modes") {
    auto mode = GENERATE(0, 1);
    Proc s;
    std::string ior = start_server(s, mode ? kBoth + kPool : kBoth);
    std::vector<std::unique_ptr<Proc>> cs;
    for (int i = 0; i < 4; ++i) {
        cs.push_back(std::make_unique<Proc>());
        spawn(*cs.back(), "orb-echo-client", {ior, "concurrent", "4", "300"});
    }
    for (auto &c : cs) {
        std::string out = c->rest(60000);
        INFO(out);
        CHECK(c->wait(5000) == 0);
        CHECK(value(out, "vipl_connected") >= 1);
    }
}

TEST_CASE("call timeout is honoured") {
    Proc s;
    std::string ior = start_server(s, kBoth);
    auto r = run_client(ior, {"timeout"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "timeout_ms") < 2000);
}

TEST_CASE("a server killed mid-call gives COMM_FAILURE or TRANSIENT") {
    auto pool = GENERATE(0, 1);
    Proc s;
    std::string ior = start_server(s, pool ? kBoth + kPool : kBoth);
    Proc c;
    spawn(c, "orb-echo-client", {ior, "death"});
    REQUIRE(c.line(15000) == "pinged");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(s.pid, SIGKILL);
    std::string out = c.rest(10000);
    INFO(out);
    CHECK(c.wait(5000) == 0);
    CHECK((contains(out, "COMM_FAILURE") || contains(out, "TRANSIENT")));
}

TEST_CASE("a restarted server is reached again with the same IOR") {
    // Fixed ports, so that the restarted server's IOR is the first's.  Another program's
    // connection may hold a port chosen now by the time the server binds it: try others.
    Args eps;
    auto s = std::make_unique<Proc>();
    std::string ior;
    for (int attempt = 0; attempt < 5 && ior.rfind("IOR:", 0) != 0; ++attempt) {
        std::string vport = std::to_string(30000 + (getpid() + attempt * 7919) % 9000);
        eps = {"-ORBendPoint", "giop:vipl::" + vport, "-ORBendPoint",
               "giop:tcp:127.0.0.1:" + std::to_string(free_tcp_port())};
        s = std::make_unique<Proc>();
        spawn(*s, "orb-echo-server", eps, false);
        ior = s->line(15000);
    }
    REQUIRE(ior.rfind("IOR:", 0) == 0);
    Proc c;
    spawn(c, "orb-echo-client", {ior, "restart"});
    REQUIRE(c.line(15000) == "pinged");
    s.reset(); // SIGKILL
    auto s2 = std::make_unique<Proc>();
    start_server(*s2, eps);
    REQUIRE(write(c.in, "\n", 1) == 1);
    std::string out = c.rest(30000);
    INFO(out);
    CHECK(c.wait(5000) == 0);
    CHECK(value(out, "vipl_connected") >= 2);
}

TEST_CASE("clients with and without the plug-in on one server") {
    Proc s;
    std::string ior = start_server(s, kBoth);
    Proc a, b;
    spawn(a, "orb-echo-client", {ior, "concurrent", "2", "300"});
    spawn(b, "orb-echo-client-plain", {ior, "concurrent", "2", "300"});
    std::string oa = a.rest(60000), ob = b.rest(60000);
    INFO(oa << ob);
    CHECK(a.wait(5000) == 0);
    CHECK(b.wait(5000) == 0);
    CHECK(value(oa, "vipl_connected") >= 1);
    CHECK(value(ob, "vipl_connected") == -1); // no plug-in: TCP
}

TEST_CASE("unmodified omniORB programs get vipl by LD_PRELOAD") {
    Proc s;
    std::string ior = start_server(s, kBoth, "orb-echo-server-plain", true);
    auto r = run_client(ior, {"sizes"}, {}, "orb-echo-client-plain", true);
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") >= 1);
    CHECK(server_accepted(ior) >= 1);
}

TEST_CASE("a vipl-only server serves plug-in clients and refuses others") {
    Proc s;
    std::string ior = start_server(s, {"-ORBendPoint", "giop:vipl::0"});
    auto r = run_client(ior, {"sizes"});
    CHECK(r.code == 0);
    r = run_client(ior, {"sizes"}, {}, "orb-echo-client-plain");
    CHECK(r.code == 3);
    CHECK(contains(r.out, "TRANSIENT"));
}

TEST_CASE("the user's transport rules win") {
    Proc s;
    std::string ior = start_server(s, kBoth);
    auto r = run_client(ior, {"sizes"}, {"-ORBclientTransportRule", "* tcp"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") == 0);
    r = run_client(ior, {"sizes"}, {"-ORBclientTransportRule", "* vipl,tcp"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") >= 1);
}

TEST_CASE("ORB shutdown with open connections returns") {
    auto pool = GENERATE(0, 1);
    Proc s;
    std::string ior = start_server(s, pool ? kBoth + kPool : kBoth);
    Proc idle; // a second client holding a connection open
    spawn(idle, "orb-echo-client", {ior, "idle", "20"});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto r = run_client(ior, {"shutdown"});
    CHECK(r.code == 0);
    CHECK(s.wait(10000) == 0);
}

TEST_CASE("idle connections are scavenged and reopened") {
    Proc s;
    std::string ior =
        start_server(s, kBoth + Args{"-ORBscanGranularity", "1", "-ORBinConScanPeriod", "1"});
    auto r = run_client(ior, {"idle", "4"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") >= 2);
}

TEST_CASE("a server accepts 20 concurrent clients with no accept thread of its own") {
    // An idle vipl-only server has the threads omniORB makes for any endpoint: as many as
    // a tcp-only one (the listener's fd is polled by omniORB's own server loop).
    Proc tcp_only, vipl_only;
    start_server(tcp_only, {"-ORBendPoint", "giop:tcp:127.0.0.1:0"});
    std::string ior = start_server(vipl_only, {"-ORBendPoint", "giop:vipl::0"});
    int baseline = settled_threads(tcp_only.pid);
    CHECK(baseline >= 1);
    CHECK(settled_threads(vipl_only.pid) == baseline);

    constexpr int kClients = 20;
    std::vector<std::unique_ptr<Proc>> cs;
    for (int i = 0; i < kClients; ++i) {
        cs.push_back(std::make_unique<Proc>());
        spawn(*cs.back(), "orb-echo-client", {ior, "concurrent", "2", "50"});
    }
    int ok = 0;
    for (auto &c : cs) {
        std::string out = c->rest(60000);
        INFO(out);
        int code = c->wait(5000);
        CHECK(code == 0);
        CHECK(value(out, "vipl_connected") >= 1);
        ok += code == 0;
    }
    CHECK(ok == kClients);
    auto r = run_client(ior, {"server-accepted"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "server_accepted") >= kClients);
}

TEST_CASE("server transport rules match a vipl peer's real address") {
    std::string provider = GENERATE("shm", "tcp");
    INFO("provider " << provider);
    const Args eps = {"-ORBendPoint",         "giop:vipl:127.0.0.1:0", "-ORBendPoint",
                      "giop:tcp:127.0.0.1:0", "-ORBviplProvider",      provider};
    // vipl only, from the loopback network: the peer is 127.0.0.1 (shm: this host).
    Proc s;
    std::string ior =
        start_server(s, eps + Args{"-ORBserverTransportRule", "127.0.0.0/255.0.0.0 vipl"});
    auto r = run_client(ior, {"sizes"});
    CHECK(r.code == 0);
    CHECK(value(r.out, "vipl_connected") >= 1);
    // A rule for another network refuses the same client.
    Proc other;
    ior =
        start_server(other, eps + Args{"-ORBserverTransportRule", "192.0.2.0/255.255.255.0 vipl"});
    r = run_client(ior, {"sizes"});
    CHECK(r.code == 3);
    CHECK((contains(r.out, "TRANSIENT") || contains(r.out, "COMM_FAILURE")));
}

TEST_CASE("the ORB's vipl options are the stream's: its ranges, defaults and messages") {
    // Each ORB option with the stream key it stands for (vipl/stream_config.h).
    const std::pair<const char *, const char *> rows[] = {
        {"viplSpinTime", "STREAM_SPIN_US"},
        {"viplBufferSize", "STREAM_BUFFER_SIZE"},
        {"viplRecvBuffers", "STREAM_RECV_BUFFERS"},
        {"viplSendBuffers", "STREAM_SEND_BUFFERS"},
        {"viplLinger", "STREAM_LINGER_MS"}};
    auto key = [](const char *name) {
        for (const vipl::StreamConfigKey &k : vipl::stream_config_table())
            if (std::string(k.name) == name) return k;
        FAIL("no stream key " << name);
        return vipl::StreamConfigKey{};
    };

    // Defaults: omniORB's dump of the configuration shows the stream table's.
    Proc s;
    spawn(s, "orb-echo-server", {"-ORBendPoint", "giop:vipl::0", "-ORBdumpConfiguration", "1"},
          false, true);
    std::string dump;
    for (std::string l; !contains(dump, "IOR:") && !(l = s.line(15000)).empty();) dump += l + "\n";
    INFO(dump);
    for (auto [orb, stream] : rows)
        CHECK(contains(dump, std::string(orb) + " = " + key(stream).default_value));
    CHECK(contains(dump, "viplProvider = auto"));

    // A value the stream refuses is refused by the ORB, with the stream's sentence.
    for (auto [orb, stream] : rows) {
        auto k = key(stream);
        for (uint64_t bad : {k.max + 1, k.min > 0 ? k.min - 1 : k.max + 2}) {
            Proc p;
            spawn(p, "orb-echo-server",
                  {"-ORBendPoint", "giop:vipl::0", std::string("-ORB") + orb, std::to_string(bad)},
                  false, true);
            std::string out = p.rest(15000);
            INFO(orb << " " << bad << ": " << out);
            CHECK(p.wait(10000) != 0);
            CHECK(contains(out,
                           "out of range " + std::to_string(k.min) + ".." + std::to_string(k.max)));
        }
    }
    // One in range is taken.
    Proc ok;
    std::string ior = start_server(
        ok, {"-ORBendPoint", "giop:vipl::0", "-ORBviplRecvBuffers", "1", "-ORBviplLinger", "0"});
    auto r = run_client(ior, {"sizes"});
    CHECK(r.code == 0);
}
