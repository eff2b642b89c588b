// The paper's Table 5: what one VipPostSend and one VipPostRecv cost.
//
// The client (measured) posts batches of `batch` descriptors between two
// clock reads and reports ns per call.  The server, on the other CPU, spins
// in VipRecvWait with a large budget, so the client always finds it awake:
// posting then needs no doorbell unless VIPL_SHM_FORCE_DOORBELL=1 makes the
// client write the server's eventfd on every post (the system call the
// paper's driver made).  The server's own settings are fixed here so only
// the client's environment varies between runs.
//
// Send batches: every message is 8 bytes (COPY-SEND-COPY, complete once in
// the ring); after each batch the server answers, so every batch starts on
// an empty ring.  Receive batches: the client posts `batch` receives, then
// asks the server for that many 0-byte messages and takes them.
//
// --peer chooses the server's state while the client posts:
//   spin    it spins in VipRecvWait, polling the very ring lines being written;
//   busy    it is awake but computing (not polling) while a batch is posted;
//   asleep  it sleeps in VipRecvWait (VIPL_SPIN_US=0): every timed post finds
//           it asleep and makes the system call that wakes it (one post at a
//           time, the server going back to sleep between samples).
//
// Output:  post send|recv NS_PER_CALL_MEDIAN NS_PER_CALL_P10 CALLS DOORBELLS
#include "harness.h"
#include "vipl_conn.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <getopt.h>
#include <signal.h>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using namespace bench;

constexpr uint32_t kBatchDone = 1;
constexpr uint32_t kSendMe = 2;
constexpr uint32_t kQuit = 3;
constexpr uint32_t kHold = 4;    // busy: the server stops polling for hold_us
constexpr uint32_t kHolding = 5; // its answer: from now on it computes
constexpr uint32_t kMessage = 8;

struct Params {
    int client_cpu = 0, server_cpu = 1;
    int batch = 32;
    int batches = 2000;
    int timeout_s = 60;
    std::string peer = "spin";
    int hold_us = 300;
};

void busy_for(int us) {
    uint64_t end = now_ns() + static_cast<uint64_t>(us) * 1000;
    while (now_ns() < end) {
    }
}

void server(const Params &p, const std::string &disc) {
    // Enough receives for a full ring of the smallest records and more.
    const int nrecv = 1024;
    ViplConn c(p.batch, nrecv, 64);
    for (int i = 0; i < nrecv; ++i) c.post_recv(i);
    c.accept(disc);
    long got = 0;
    for (;;) {
        VIP_DESCRIPTOR *d = c.wait_recv();
        uint32_t imm = ViplConn::imm_of(d);
        if (imm == kQuit) break; // the client may already have disconnected
        c.post_recv(c.recv_index(d));
        if (imm == kHold) {
            c.post_send(0, 0, kHolding);
            c.wait_send();
            busy_for(p.hold_us); // awake, but not looking at the ring
            continue;
        }
        if (imm == kSendMe) {
            for (int i = 0; i < p.batch; ++i) c.post_send(i, 0);
            for (int i = 0; i < p.batch; ++i) c.wait_send();
            continue;
        }
        if (++got % p.batch == 0) {
            c.post_send(0, 0, kBatchDone);
            c.wait_send();
        }
    }
}

struct Stats {
    double median, p10;
};

Stats stats(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return {v[(v.size() - 1) / 2], v[v.size() / 10]};
}

void client(const Params &p, const std::string &disc) {
    ViplConn c(p.batch + 1, p.batch, 64);
    c.connect(disc);
    // Let the server settle into its spin before the first batch.
    for (int i = 0; i < p.batch; ++i) c.post_recv(i);
    c.post_send(0, 0, kSendMe);
    c.wait_send();
    for (int i = 0; i < p.batch; ++i) c.wait_recv();

    // Doorbells are counted around the timed posts only: taking the server's
    // answer may ring too (to wake a sender waiting for ring space).
    std::vector<double> per_call;
    uint64_t doorbells = 0;
    long calls = 0;
    if (p.peer == "asleep") {
        // One post per sample, each finding the server asleep.
        int samples = std::max(200, p.batches / 10);
        for (int b = 0; b < samples * 32; b += 32) {
            usleep(1500); // the server goes back to sleep
            c.post_recv(0);
            uint64_t before = c.counters().DoorbellsRung;
            uint64_t t0 = now_ns();
            c.post_send(0, kMessage);
            uint64_t t1 = now_ns();
            doorbells += c.counters().DoorbellsRung - before;
            per_call.push_back(static_cast<double>(t1 - t0));
            ++calls;
            c.wait_send();
            for (int i = 1; i < p.batch; ++i) { // the rest of the batch, untimed
                c.post_send(i, kMessage);
                c.wait_send();
            }
            c.wait_recv();
        }
        Stats s = stats(per_call);
        printf("post send %.1f %.1f %ld %lu\n", s.median, s.p10, calls,
               static_cast<unsigned long>(doorbells));
        fflush(stdout);
        c.post_send(p.batch, 0, kQuit);
        c.wait_send();
        return;
    }
    bool busy = p.peer == "busy";
    for (int b = 0; b < p.batches; ++b) {
        c.post_recv(0);
        if (busy) { // the server answers, then computes for hold_us
            c.post_send(0, 0, kHold);
            c.wait_send();
            c.wait_recv();
            c.post_recv(0);
        }
        uint64_t before = c.counters().DoorbellsRung;
        uint64_t t0 = now_ns();
        for (int i = 0; i < p.batch; ++i) c.post_send(i, kMessage);
        uint64_t t1 = now_ns();
        doorbells += c.counters().DoorbellsRung - before;
        per_call.push_back(static_cast<double>(t1 - t0) / p.batch);
        calls += p.batch;
        for (int i = 0; i < p.batch; ++i) c.wait_send();
        c.wait_recv();
    }
    Stats s = stats(per_call);
    printf("post send %.1f %.1f %ld %lu\n", s.median, s.p10, calls,
           static_cast<unsigned long>(doorbells));
    per_call.clear();
    uint64_t recv_doorbells = 0;
    for (int b = 0; b < p.batches; ++b) {
        uint64_t before = c.counters().DoorbellsRung;
        uint64_t t0 = now_ns();
        for (int i = 0; i < p.batch; ++i) c.post_recv(i);
        uint64_t t1 = now_ns();
        recv_doorbells += c.counters().DoorbellsRung - before;
        per_call.push_back(static_cast<double>(t1 - t0) / p.batch);
        c.post_send(p.batch, 0, kSendMe);
        c.wait_send();
        for (int i = 0; i < p.batch; ++i) c.wait_recv();
    }
    s = stats(per_call);
    printf("post recv %.1f %.1f %ld %lu\n", s.median, s.p10, static_cast<long>(p.batch) * p.batches,
           static_cast<unsigned long>(recv_doorbells));
    fflush(stdout);
    c.post_send(p.batch, 0, kQuit);
    c.wait_send();
}

} // namespace

int main(int argc, char **argv) {
    Params p;
    static const option longopts[] = {
        {"cpus", required_argument, nullptr, 'c'},    {"batch", required_argument, nullptr, 'b'},
        {"batches", required_argument, nullptr, 'n'}, {"timeout", required_argument, nullptr, 't'},
        {"peer", required_argument, nullptr, 'p'},    {nullptr, 0, nullptr, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, nullptr)) != -1) {
        switch (opt) {
        case 'c':
            if (sscanf(optarg, "%d,%d", &p.client_cpu, &p.server_cpu) != 2) fail("--cpus C,S");
            break;
        case 'b':
            p.batch = std::clamp(atoi(optarg), 1, 64);
            break;
        case 'n':
            p.batches = std::max(1, atoi(optarg));
            break;
        case 't':
            p.timeout_s = std::max(1, atoi(optarg));
            break;
        case 'p':
            p.peer = optarg;
            if (p.peer != "spin" && p.peer != "busy" && p.peer != "asleep")
                fail("--peer spin|busy|asleep");
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--cpus C,S] [--batch N] [--batches N] [--timeout S] "
                    "[--peer spin|busy|asleep]\n",
                    argv[0]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    std::string disc = "vpc" + std::to_string(getpid());
    pid_t parent = getpid();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        alarm(static_cast<unsigned>(p.timeout_s));
        // Read by libvipl at its first use, which is after this point in the child.
        setenv("VIPL_SPIN_US", p.peer == "asleep" ? "0" : "1000000", 1);
        setenv("VIPL_SHM_FORCE_DOORBELL", "0", 1);
        pin_cpu(p.server_cpu);
        server(p, disc);
        _exit(0);
    }
    alarm(static_cast<unsigned>(p.timeout_s));
    pin_cpu(p.client_cpu);
    client(p, disc);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
