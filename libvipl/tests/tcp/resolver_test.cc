// The tcp provider's name service against a DNS server played by the test:
// each case runs in a child with its own network and mount namespaces,
// where /etc/hosts and /etc/resolv.conf are the test's and a server on
// 127.0.0.1:53 answers (or stays silent) as the case needs.
#include "netns.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

// ------------------------------------------------------ the DNS server

std::string read_qname(const uint8_t *m, size_t len, size_t *pos) {
    std::string out;
    size_t p = 12;
    while (p < len && m[p]) {
        if (!out.empty()) out += '.';
        out.append(reinterpret_cast<const char *>(m + p + 1), m[p]);
        p += 1 + m[p];
    }
    *pos = p + 1;
    return out;
}

void put16(std::vector<uint8_t> &m, uint16_t v) {
    m.push_back(static_cast<uint8_t>(v >> 8));
    m.push_back(static_cast<uint8_t>(v));
}

// Answers: db1.example A 10.1.2.3 (no AAAA), gone.example NXDOMAIN, PTR of
// 10.1.2.3, and nothing at all for slow.example.  Counts the queries.
struct DnsServer {
    int fd = -1;
    std::atomic<bool> stop{false};
    std::atomic<int> queries{0};
    std::thread thread;

    bool start() {
        fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(53);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0) return false;
        thread = std::thread([this] { serve(); });
        return true;
    }
    ~DnsServer() {
        stop = true;
        if (thread.joinable()) thread.join();
        if (fd >= 0) close(fd);
    }

    void serve() {
        while (!stop) {
            pollfd p{fd, POLLIN, 0};
            if (poll(&p, 1, 20) <= 0) continue;
            uint8_t q[512];
            sockaddr_in from{};
            socklen_t fl = sizeof from;
            ssize_t n = recvfrom(fd, q, sizeof q, 0, reinterpret_cast<sockaddr *>(&from), &fl);
            if (n < 17) continue;
            ++queries;
            size_t pos;
            std::string name = read_qname(q, static_cast<size_t>(n), &pos);
            uint16_t type = static_cast<uint16_t>(q[pos] << 8 | q[pos + 1]);
            if (name == "slow.example") continue;
            std::vector<uint8_t> r(q, q + pos + 4); // header and question
            r[2] = 0x81;                            // response, recursion desired
            r[3] = 0x80;                            // recursion available, no error
            r[7] = 0;                               // answers, set below
            std::vector<uint8_t> rdata;
            uint16_t rtype = 0;
            if (name == "gone.example") {
                r[3] |= 3; // NXDOMAIN
            } else if (name == "db1.example" && type == 1) {
                rtype = 1;
                rdata = {10, 1, 2, 3};
            } else if (name == "3.2.1.10.in-addr.arpa" && type == 12) {
                rtype = 12;
                for (const char *label : {"db1", "example"}) {
                    rdata.push_back(static_cast<uint8_t>(strlen(label)));
                    rdata.insert(rdata.end(), label, label + strlen(label));
                }
                rdata.push_back(0);
            }
            if (rtype) {
                r[7] = 1;
                put16(r, 0xC00C); // the question's name, compressed
                put16(r, rtype);
                put16(r, 1);
                put16(r, 0);
                put16(r, 60);
                put16(r, static_cast<uint16_t>(rdata.size()));
                r.insert(r.end(), rdata.begin(), rdata.end());
            }
            sendto(fd, r.data(), r.size(), 0, reinterpret_cast<sockaddr *>(&from), fl);
        }
    }
};

// --------------------------------------------------- the child's world

bool write_file(const std::string &path, const std::string &text) {
    FILE *f = fopen(path.c_str(), "w");
    if (!f) return false;
    fputs(text.c_str(), f);
    return fclose(f) == 0;
}

// Own namespaces, loopback up, the test's /etc/hosts and /etc/resolv.conf.
std::string enter_world(const std::string &dir) {
    if (unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) return "unshare: " + std::string(strerror(errno));
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return "mount private: " + std::string(strerror(errno));
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    strcpy(ifr.ifr_name, "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    bool up = s >= 0 && ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
    if (s >= 0) close(s);
    if (!up) return "loopback up: " + std::string(strerror(errno));
    std::string hosts = dir + "/hosts", resolv = dir + "/resolv.conf";
    if (!write_file(hosts, "127.0.0.1 localhost\n10.9.8.7 node-a.test node-a # a comment\n") ||
        !write_file(resolv, "nameserver 127.0.0.1\noptions timeout:3 attempts:1\n"))
        return "cannot write the files";
    if (mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0 ||
        mount(resolv.c_str(), "/etc/resolv.conf", nullptr, MS_BIND, nullptr) != 0)
        return "bind mount: " + std::string(strerror(errno));
    return "";
}

// Runs `body` in a child inside its world; returns what it reported ("" = all well).
std::string in_world(const std::function<std::string(VIP_NIC_HANDLE)> &body) {
    char dir[] = "/tmp/vipl-resolver-XXXXXX";
    REQUIRE(mkdtemp(dir));
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        std::string why = enter_world(dir);
        if (why.empty()) {
            DnsServer dns;
            VIP_NIC_HANDLE nic = nullptr;
            if (!dns.start())
                why = "the DNS server cannot bind 127.0.0.1:53";
            else if (VipOpenNic("tcp:127.0.0.1", &nic) != VIP_SUCCESS)
                why = "VipOpenNic(tcp:127.0.0.1) failed";
            else if (VipNSInit(nic, nullptr) != VIP_SUCCESS)
                why = "VipNSInit failed";
            else
                why = body(nic);
            if (nic) VipCloseNic(nic);
        }
        if (why.empty()) why = "ok";
        ssize_t n = write(p[1], why.data(), why.size());
        (void)n;
        _exit(0);
    }
    close(p[1]);
    std::string out;
    char buf[256];
    uint64_t end = vt::mono_ns() + 30'000'000'000ull;
    for (;;) {
        pollfd pf{p[0], POLLIN, 0};
        int left = static_cast<int>((end - std::min(end, vt::mono_ns())) / 1000000);
        if (left <= 0 || poll(&pf, 1, left) <= 0) {
            kill(pid, SIGKILL);
            out += " (child killed at the 30 s bound)";
            break;
        }
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    std::string rm = std::string("rm -rf ") + dir;
    CHECK(system(rm.c_str()) == 0);
    return out == "ok" ? "" : out.empty() ? "the child reported nothing" : out;
}

std::string address_of(VIP_NIC_HANDLE nic, const char *name, VIP_RETURN *rc) {
    VIP_NET_ADDRESS *a = static_cast<VIP_NET_ADDRESS *>(calloc(1, sizeof(VIP_NET_ADDRESS) + 64));
    *rc = VipNSGetHostByName(nic, const_cast<VIP_CHAR *>(name), a, 0);
    char text[64] = "";
    if (*rc == VIP_SUCCESS && a->HostAddressLen == 4)
        inet_ntop(AF_INET, a->HostAddress, text, sizeof text);
    free(a);
    return text;
}

std::atomic<int> g_alarms{0};
void on_alarm(int) {
    ++g_alarms;
}

} // namespace

TEST_CASE("The tcp name service reads /etc/hosts and asks the DNS servers of /etc/resolv.conf",
          "[tcp][resolver]") {
    std::string why = in_world([](VIP_NIC_HANDLE nic) -> std::string {
        VIP_RETURN rc;
        if (address_of(nic, "node-a.test", &rc) != "10.9.8.7") return "node-a.test from /etc/hosts";
        if (address_of(nic, "NODE-A", &rc) != "10.9.8.7") return "an alias, any case";
        if (address_of(nic, "db1.example", &rc) != "10.1.2.3") return "db1.example from DNS";
        if (address_of(nic, "db1.example.", &rc) != "10.1.2.3") return "a name ending in a dot";
        if (address_of(nic, "10.4.5.6", &rc) != "10.4.5.6") return "a numeric address";
        address_of(nic, "gone.example", &rc);
        if (rc != VIP_ERROR_NAMESERVICE) return "NXDOMAIN gives VIP_ERROR_NAMESERVICE";
        address_of(nic, "bad..name", &rc);
        if (rc != VIP_ERROR_NAMESERVICE) return "a malformed name gives VIP_ERROR_NAMESERVICE";
        // Reverse: from /etc/hosts, then a PTR query.
        VIP_NET_ADDRESS *a =
            static_cast<VIP_NET_ADDRESS *>(calloc(1, sizeof(VIP_NET_ADDRESS) + 64));
        a->HostAddressLen = 4;
        uint8_t db1[4] = {10, 1, 2, 3}, node[4] = {10, 9, 8, 7};
        char name[256];
        VIP_ULONG len = sizeof name;
        memcpy(a->HostAddress, node, 4);
        rc = VipNSGetHostByAddr(nic, a, name, &len);
        if (rc != VIP_SUCCESS || strcmp(name, "node-a.test")) return "reverse from /etc/hosts";
        memcpy(a->HostAddress, db1, 4);
        len = sizeof name;
        rc = VipNSGetHostByAddr(nic, a, name, &len);
        free(a);
        if (rc != VIP_SUCCESS || strcmp(name, "db1.example")) return "reverse by a PTR query";
        return "";
    });
    INFO(why);
    CHECK(why.empty());
}

TEST_CASE("A lookup waiting for a silent DNS server returns VIP_INTERRUPTED when a signal handler "
          "runs (SA_RESTART or not)",
          "[tcp][resolver]") {
    for (int restart : {0, 1}) {
        std::string why = in_world([restart](VIP_NIC_HANDLE nic) -> std::string {
            struct sigaction sa {};
            sa.sa_handler = on_alarm;
            sa.sa_flags = restart ? SA_RESTART : 0;
            sigaction(SIGALRM, &sa, nullptr);
            itimerval t{};
            t.it_value.tv_usec = 100000;
            setitimer(ITIMER_REAL, &t, nullptr);
            uint64_t start = vt::mono_ns();
            VIP_RETURN rc;
            address_of(nic, "slow.example", &rc);
            uint64_t took_ms = (vt::mono_ns() - start) / 1000000;
            if (rc != VIP_INTERRUPTED)
                return "slow.example returned " + std::to_string(rc) + " after " +
                       std::to_string(took_ms) + " ms, not VIP_INTERRUPTED";
            if (g_alarms != 1 || took_ms < 90 || took_ms > 1500)
                return "interrupted after " + std::to_string(took_ms) + " ms";
            // The next lookup works, and a silent server ends in a timeout.
            if (address_of(nic, "db1.example", &rc) != "10.1.2.3") return "the lookup after";
            start = vt::mono_ns();
            address_of(nic, "slow.example", &rc);
            took_ms = (vt::mono_ns() - start) / 1000000;
            if (rc != VIP_ERROR_NAMESERVICE || took_ms < 2900 || took_ms > 6000)
                return "a silent server: rc " + std::to_string(rc) + " after " +
                       std::to_string(took_ms) + " ms (options timeout:3 attempts:1)";
            return "";
        });
        INFO("SA_RESTART " << restart << ": " << why);
        CHECK(why.empty());
    }
}
