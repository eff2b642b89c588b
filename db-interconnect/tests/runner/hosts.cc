#include "hosts.h"

#include "process.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <vector>

namespace dbt {

namespace {

constexpr char kPrefix[] = "vipl-dbt";

std::vector<std::string> words(const std::string &s) {
    std::istringstream in(s);
    std::vector<std::string> v;
    std::string w;
    while (in >> w) v.push_back(w);
    return v;
}

bool run_ip(const std::vector<std::string> &args, std::string *out) {
    std::vector<std::string> argv = {"ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    int st = -1;
    *out = capture(argv, 10000, &st);
    return st == 0;
}

// Namespaces of ours whose creating process is gone (a run that died).
void remove_stale() {
    DIR *d = opendir("/run/netns");
    if (!d) return;
    std::vector<std::string> stale;
    while (dirent *e = readdir(d)) {
        if (std::strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
        long pid = std::atol(e->d_name + sizeof kPrefix - 1);
        if (pid > 0 && pid != getpid() && !alive(static_cast<int>(pid))) stale.push_back(e->d_name);
    }
    closedir(d);
    std::string out;
    for (const std::string &n : stale) run_ip({"netns", "del", n}, &out);
}

} // namespace

std::string hosts_unavailable() {
    if (geteuid() != 0) return "not root";
    std::string out;
    if (!run_ip({"-V"}, &out)) return "no usable ip(8): " + out;
    return "";
}

HostPair::HostPair() {
    static int count = 0;
    int n = count++;
    long pid = getpid();
    unsigned a = 64 + static_cast<unsigned>((pid >> 8) % 128);
    unsigned b = static_cast<unsigned>((pid * 7 + n * 37) % 256);
    for (int s = 0; s < 2; ++s) {
        ns_[s] = kPrefix + std::to_string(pid) + "-" + std::to_string(n) + (s ? "b" : "a");
        addr_[s] =
            "10." + std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(s + 1);
    }
    remove_stale();
    for (int s = 0; s < 2; ++s) {
        std::string out;
        if (!run_ip({"netns", "add", ns_[s]}, &out)) {
            remove();
            FAIL("ip netns add " << ns_[s] << ": " << out);
        }
        made_[s] = true;
    }
    ip(0, "link add veth0 type veth peer name veth1 netns " + ns_[1]);
    for (int s = 0; s < 2; ++s) {
        std::string dev = "veth" + std::to_string(s);
        ip(s, "addr add " + addr_[s] + "/24 dev " + dev);
        ip(s, "link set dev lo up");
        ip(s, "link set dev " + dev + " up");
    }
}

HostPair::~HostPair() {
    remove();
}

void HostPair::ip(int side, const std::string &args) {
    std::vector<std::string> argv = {"-n", ns_[side]};
    for (const std::string &w : words(args)) argv.push_back(w);
    std::string out;
    if (run_ip(argv, &out)) return;
    remove();
    FAIL("ip -n " << ns_[side] << " " << args << ": " << out);
}

void HostPair::remove() {
    std::string out;
    for (int s = 0; s < 2; ++s)
        if (made_[s]) {
            run_ip({"netns", "del", ns_[s]}, &out);
            made_[s] = false;
        }
}

} // namespace dbt
