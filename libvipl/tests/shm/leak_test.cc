// Nothing of a connection outlives its processes: the connection memory is a
// memfd (never a file in a directory), the sockets are abstract, and a
// process that disconnected, destroyed its VI and closed its NIC keeps
// neither a mapping nor a descriptor of it.
//
// The surviving process is a fresh program so that it inherits no mapping of
// the test runner.
#include "procs.h"

#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr size_t kBuf = 1 << 20;
constexpr size_t kRegion = (64 << 10) + 4 * kBuf;

uint8_t *rbuf(vt::Ep &ep, int i) {
    return ep.mem + (64 << 10) + i * kBuf;
}
uint8_t *sbuf(vt::Ep &ep) {
    return ep.mem + (64 << 10) + 2 * kBuf;
}
uint8_t *window(vt::Ep &ep) {
    return ep.mem + (64 << 10) + 3 * kBuf;
}

// Opens the endpoint with its receives posted before it connects.
bool prepare(vt::Ep &ep) {
    vt::Opts o;
    o.rdma_write = o.rdma_read = true;
    if (!ep.open(kRegion, o)) return false;
    for (int i = 0; i < 2; ++i) {
        vt::set_desc(ep.desc(i), rbuf(ep, i), kBuf, ep.mh);
        if (!ep.post_recv(ep.desc(i))) return false;
    }
    return true;
}

// Messages of both paths each way, then an RDMA write and an RDMA read.
// Returns "" or what went wrong.
std::string transfer(vt::Ep &ep, int role) {
    // Server first sends its window address, the client answers with its own.
    uint64_t peer[2] = {0, 0};
    uint32_t sizes[] = {16, 100, 600, 100000, static_cast<uint32_t>(kBuf)};
    for (int step = 0; step < 2 * 5; ++step) {
        bool mine = (step % 2) == role;
        uint32_t len = sizes[step / 2];
        int slot = (step / 2) % 2;
        if (mine) {
            vt::fill_pattern(sbuf(ep), len, step);
            if (step < 2) {
                uint64_t w[2] = {reinterpret_cast<uint64_t>(window(ep)), ep.mh};
                memcpy(sbuf(ep), w, 16);
            }
            vt::set_desc(ep.desc(4), sbuf(ep), len, ep.mh);
            if (!ep.post_send(ep.desc(4)) || !ep.wait_send(ep.desc(4))) return ep.err;
        } else {
            if (!ep.wait_recv(ep.desc(slot))) return ep.err;
            if (ep.desc(slot)->CS.Length != len)
                return vt::fmt("step %d: %u bytes", step, ep.desc(slot)->CS.Length);
            if (step < 2)
                memcpy(peer, rbuf(ep, slot), 16);
            else if (!vt::check_pattern(rbuf(ep, slot), len, step))
                return vt::fmt("step %d: data differs", step);
            vt::set_desc(ep.desc(slot), rbuf(ep, slot), kBuf, ep.mh);
            if (!ep.post_recv(ep.desc(slot))) return ep.err;
        }
    }
    vt::fill_pattern(sbuf(ep), 70000, 99);
    vt::set_rdma(ep.desc(4), VIP_CONTROL_OP_RDMAWRITE, sbuf(ep), 70000, ep.mh, peer[0],
                 static_cast<VIP_MEM_HANDLE>(peer[1]));
    if (!ep.post_send(ep.desc(4)) || !ep.wait_send(ep.desc(4))) return ep.err;
    vt::set_rdma(ep.desc(4), VIP_CONTROL_OP_RDMAREAD, sbuf(ep), 70000, ep.mh, peer[0],
                 static_cast<VIP_MEM_HANDLE>(peer[1]));
    if (!ep.post_send(ep.desc(4)) || !ep.wait_send(ep.desc(4))) return ep.err;
    return "";
}

// What a process must not hold once it closed everything.
std::vector<std::string> leftovers() {
    std::vector<std::string> out;
    for (auto &m : vt::maps_with("memfd:vipl")) out.push_back("mapping: " + m);
    for (auto &f : vt::fds_with("memfd:vipl")) out.push_back("descriptor: " + f);
    return out;
}

// The client: transfers, then either closes everything and checks itself, or
// waits to be killed.
int client(vt::Channel &ch, const std::string &disc, bool killed) {
    ch.in_child();
    vt::Ep ep;
    if (!prepare(ep) || !ep.connect(disc)) {
        fprintf(stderr, "client: %s\n", ep.err.c_str());
        return 1;
    }
    std::string err = transfer(ep, 1);
    if (!err.empty()) {
        fprintf(stderr, "client: %s\n", err.c_str());
        return 2;
    }
    ch.send(1);
    if (killed) {
        sleep(20);
        return 3;
    }
    uint64_t go;
    if (!ch.recv(&go, 10000)) return 4;
    if (VipDisconnect(ep.vi) != VIP_SUCCESS) return 5;
    ep.close();
    std::vector<std::string> left = leftovers();
    if (!left.empty()) {
        fprintf(stderr, "client after closing everything still holds:\n%s\n",
                vt::join(left).c_str());
        return 6;
    }
    return 0;
}

// Other programs on the machine may use /dev/shm meanwhile: new entries count
// as ours when named after libvipl or one of our processes.
std::vector<std::string> ours_in_dev_shm(const std::set<std::string> &before, pid_t peer) {
    std::vector<std::string> out;
    for (const std::string &e : vt::dir_entries("/dev/shm")) {
        if (before.count(e)) continue;
        if (e.find("vipl") != std::string::npos ||
            e.find(std::to_string(getpid())) != std::string::npos ||
            (peer > 0 && e.find(std::to_string(peer)) != std::string::npos))
            out.push_back(e);
    }
    return out;
}

void serve_one(const std::string &disc, bool kill_client, const std::set<std::string> &shm_before,
               const std::set<std::string> &inherited) {
    vt::Channel ch;
    vt::Child peer(vt::spawn_child([&] { return client(ch, disc, kill_client); }));
    pid_t peer_pid = peer.pid;
    ch.in_parent();
    {
        vt::Ep ep;
        EP_REQUIRE(ep, prepare(ep));
        EP_REQUIRE(ep, ep.accept(disc));
        std::string err = transfer(ep, 0);
        INFO(err);
        REQUIRE(err.empty());
        uint64_t ready;
        REQUIRE(ch.recv(&ready, 10000));

        // While connected: the objects exist (or the checks below would prove nothing)...
        INFO("mappings:\n" << vt::join(vt::maps_with("vipl")));
        REQUIRE_FALSE(vt::maps_with("memfd:vipl-conn").empty());
        REQUIRE_FALSE(vt::unix_sockets_with(vt::listener_socket(disc)).empty());
        // ...and none of them is a file anywhere.
        std::vector<std::string> named;
        for (auto &o : vt::linked_shared_objects())
            if (!inherited.count(o)) named.push_back(o);
        CHECK(vt::join(named) == "(none)");
        CHECK(vt::join(ours_in_dev_shm(shm_before, peer.pid)) == "(none)");

        if (kill_client) {
            peer.kill_now();
            int s = peer.wait(5);
            CHECK(WIFSIGNALED(s));
        } else {
            ch.send(1);
            int s = peer.wait(10);
            INFO("client " << vt::status_text(s));
            CHECK(s == 0);
        }
        // The peer is gone: our VI leaves the Connected state.
        double end = vt::now_ms() + 2000;
        while (ep.state() == VIP_STATE_CONNECTED && vt::now_ms() < end) {
            VIP_DESCRIPTOR *d;
            VipRecvWait(ep.vi, 50, &d);
        }
        CHECK(ep.state() == VIP_STATE_ERROR);
        REQUIRE(VipDisconnect(ep.vi) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d;
        while (VipRecvDone(ep.vi, &d) != VIP_NOT_DONE) {
        }
        while (VipSendDone(ep.vi, &d) != VIP_NOT_DONE) {
        }
        REQUIRE(VipDestroyVi(ep.vi) == VIP_SUCCESS);
        ep.vi = nullptr;
        // The connection's memory goes with its VI, before the NIC is closed.
        CHECK(vt::join(vt::maps_with("memfd:vipl-conn")) == "(none)");
        CHECK(vt::join(vt::fds_with("memfd:vipl-conn")) == "(none)");
        ep.close();
    }
    std::vector<std::string> left = leftovers();
    INFO("still held after disconnect, destroy and close:\n" << vt::join(left));
    CHECK(left.empty());
    CHECK(vt::join(vt::unix_sockets_with(vt::listener_socket(disc))) == "(none)");
    CHECK(vt::join(ours_in_dev_shm(shm_before, peer_pid)) == "(none)");
}

} // namespace

TEST_CASE("shm child: leak survivor", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the case below only
    std::set<std::string> shm_before = vt::dir_entries("/dev/shm");
    REQUIRE(leftovers().empty());
    // Whatever the process inherited (a test driver's log file...) is not ours.
    std::vector<std::string> before = vt::linked_shared_objects();
    std::set<std::string> inherited(before.begin(), before.end());
    SECTION("the client exits normally") {
        serve_one(vt::env_str("VT_DISC") + "n", false, shm_before, inherited);
    }
    SECTION("the client is killed") {
        serve_one(vt::env_str("VT_DISC") + "k", true, shm_before, inherited);
    }
}

TEST_CASE("no shared-memory object outlives the processes", "[shm][leak]") {
    std::set<std::string> shm_before = vt::dir_entries("/dev/shm");
    std::string disc = vt::unique_disc("l");
    int status = vt::run_fresh("shm child: leak survivor", {"VT_FRESH=1", "VT_DISC=" + disc}, 60);
    INFO("survivor " << vt::status_text(status));
    CHECK(status == 0);
    // Both processes are gone: nothing of either connection is left on the system.
    for (const char *tag : {"n", "k"}) {
        INFO("sockets of " << disc + tag);
        CHECK(vt::join(vt::unix_sockets_with(vt::listener_socket(disc + tag))) == "(none)");
    }
    std::vector<std::string> added;
    for (auto &e : vt::dir_entries("/dev/shm"))
        if (!shm_before.count(e) && e.find("vipl") != std::string::npos) added.push_back(e);
    INFO("new in /dev/shm: " << vt::join(added));
    CHECK(added.empty());
}
