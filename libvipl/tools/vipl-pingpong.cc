// vipl-pingpong: latency and bandwidth between two processes over a VI.
//
//   vipl-pingpong -s [options]            server
//   vipl-pingpong -c [options]            client (prints the results)
//   vipl-pingpong -f [options]            both: forks the server
//
// Options: -d DEVICE (shm0)  -h HOST (localhost)  -D DISCRIMINATOR (pingpong)
//          -S SIZES (comma list, K/M suffixes)  -n ITERATIONS  -w WINDOW  -m lat|bw|both
#include <vipl.h>
#include <vipl_ext.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct Options {
    std::string device = "shm0";
    std::string host = "localhost";
    std::string disc = "pingpong";
    std::vector<uint32_t> sizes = {0, 8, 64, 512, 4096, 65536, 1 << 20};
    long iters = 10000;
    int window = 16;
    std::string mode = "both";
    char role = 0;
};

[[noreturn]] void die(const char *what, VIP_RETURN rc) {
    fprintf(stderr, "vipl-pingpong: %s: %s\n", what, VipReturnString(rc));
    exit(1);
}

void check(const char *what, VIP_RETURN rc) {
    if (rc != VIP_SUCCESS) die(what, rc);
}

uint32_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    return static_cast<uint32_t>(v);
}

// One side: a VI with `window` receive and send slots of `max` bytes each.
struct Side {
    VIP_NIC_HANDLE nic{};
    VIP_PROTECTION_HANDLE ptag{};
    VIP_VI_HANDLE vi{};
    VIP_MEM_HANDLE mh{};
    uint8_t *mem = nullptr;
    size_t mem_size = 0;
    uint32_t max = 0;
    int window = 0; // send slots; 2 * window receive slots
    VIP_DESCRIPTOR *rdesc = nullptr, *sdesc = nullptr;
    uint8_t *rbuf = nullptr, *sbuf = nullptr;
    std::vector<uint8_t> addr_local, addr_remote;

    void open(const Options &o) {
        max = *std::max_element(o.sizes.begin(), o.sizes.end());
        window = o.window;
        check("VipOpenNic", VipOpenNic(o.device.c_str(), &nic));
        check("VipCreatePtag", VipCreatePtag(nic, &ptag));
        size_t descs = 3 * window * sizeof(VIP_DESCRIPTOR);
        size_t slot = (static_cast<size_t>(max) + 63) & ~size_t(63);
        mem_size = descs + 3 * window * slot + 64;
        mem = static_cast<uint8_t *>(mmap(nullptr, mem_size, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = ptag;
        check("VipRegisterMem", VipRegisterMem(nic, mem, mem_size, &ma, &mh));
        rdesc = reinterpret_cast<VIP_DESCRIPTOR *>(mem);
        sdesc = rdesc + 2 * window;
        rbuf = mem + descs;
        sbuf = rbuf + 2 * window * slot;
        VIP_NIC_ATTRIBUTES na;
        VipQueryNic(nic, &na);
        VIP_VI_ATTRIBUTES va{};
        va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        va.MaxTransferSize = std::max<VIP_ULONG>(max, 64);
        va.Ptag = ptag;
        check("VipCreateVi", VipCreateVi(nic, &va, nullptr, nullptr, &vi));
        addr_local = address(o.host, o.disc + (o.role == 's' ? "" : "-client"));
        addr_remote = address(o.host, o.disc);
        for (int i = 0; i < 2 * window; ++i) post_recv(i);
    }
    std::vector<uint8_t> address(const std::string &host, const std::string &disc) {
        std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64 + disc.size());
        auto *na = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
        check("VipNSGetHostByName",
              VipNSGetHostByName(nic, const_cast<char *>(host.c_str()), na, 0));
        na->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
        memcpy(na->HostAddress + na->HostAddressLen, disc.data(), disc.size());
        return a;
    }
    uint8_t *rslot(int i) { return rbuf + i * ((static_cast<size_t>(max) + 63) & ~size_t(63)); }
    uint8_t *sslot(int i) { return sbuf + i * ((static_cast<size_t>(max) + 63) & ~size_t(63)); }
    void post_recv(int i) {
        VIP_DESCRIPTOR *d = &rdesc[i];
        memset(d, 0, sizeof *d);
        d->CS.SegCount = 1;
        d->CS.Length = max;
        d->DS[0].Local.Data.Address = rslot(i);
        d->DS[0].Local.Handle = mh;
        d->DS[0].Local.Length = max;
        check("VipPostRecv", VipPostRecv(vi, d, mh));
    }
    // imm 0: no immediate data.
    void send(int i, uint32_t len, uint32_t imm = 0) {
        VIP_DESCRIPTOR *d = &sdesc[i];
        memset(d, 0, sizeof *d);
        if (imm) {
            d->CS.Control = VIP_CONTROL_IMMEDIATE;
            d->CS.ImmediateData = imm;
        }
        d->CS.SegCount = len ? 1 : 0;
        d->CS.Length = len;
        d->DS[0].Local.Data.Address = sslot(i);
        d->DS[0].Local.Handle = mh;
        d->DS[0].Local.Length = len;
        check("VipPostSend", VipPostSend(vi, d, mh));
    }
    // Waits for the next receive; returns its slot, reposted by the caller.
    int recv() {
        VIP_DESCRIPTOR *d;
        VIP_RETURN rc;
        while ((rc = VipRecvWait(vi, VIP_INFINITE, &d)) == VIP_INTERRUPTED) {
        }
        check("VipRecvWait", rc);
        return static_cast<int>(d - rdesc);
    }
    void reap_send() {
        VIP_DESCRIPTOR *d;
        VIP_RETURN rc;
        while ((rc = VipSendWait(vi, VIP_INFINITE, &d)) == VIP_INTERRUPTED) {
        }
        check("VipSendWait", rc);
    }
};

double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void serve(const Options &o) {
    Side s;
    s.open(o);
    auto *local = reinterpret_cast<VIP_NET_ADDRESS *>(s.addr_local.data());
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 128);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    check("VipConnectWait",
          VipConnectWait(s.nic, local, 30000, reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()),
                         &ra, &conn));
    check("VipConnectAccept", VipConnectAccept(conn, s.vi));
    // Latency messages (no immediate data) are echoed.  In the bandwidth phase
    // (immediate data 1) every `window` messages return that many credits
    // (immediate data 3), and the closing message (2) is answered.  The client
    // ends the run by disconnecting.
    long bulk = 0;
    for (;;) {
        VIP_DESCRIPTOR *d;
        VIP_RETURN rc = VipRecvWait(s.vi, VIP_INFINITE, &d);
        if (rc == VIP_INTERRUPTED) continue;
        if (rc != VIP_SUCCESS) break;
        int i = static_cast<int>(d - s.rdesc);
        uint32_t len = d->CS.Length;
        uint32_t imm = (d->CS.Status & VIP_STATUS_IMMEDIATE) ? d->CS.ImmediateData : 0;
        s.post_recv(i);
        if (imm == 1) {
            if (++bulk % s.window == 0) {
                s.send(0, 0, 3);
                s.reap_send();
            }
            continue;
        }
        bulk = 0;
        s.send(0, imm ? 0 : len);
        s.reap_send();
    }
    VipDisconnect(s.vi);
}

void run_client(const Options &o) {
    Side c;
    c.open(o);
    VIP_VI_ATTRIBUTES ra;
    VIP_RETURN rc = VIP_NO_MATCH;
    for (int tries = 0; tries < 500 && rc == VIP_NO_MATCH; ++tries) {
        rc = VipConnectRequest(c.vi, reinterpret_cast<VIP_NET_ADDRESS *>(c.addr_local.data()),
                               reinterpret_cast<VIP_NET_ADDRESS *>(c.addr_remote.data()), 10000,
                               &ra);
        if (rc == VIP_NO_MATCH) usleep(10000);
    }
    check("VipConnectRequest", rc);
    printf("%-10s %14s %14s\n", "bytes", "one-way us", "MB/s");
    for (uint32_t size : o.sizes) {
        double lat = -1, bw = -1;
        long iters = o.iters;
        if (o.mode != "bw") {
            long warm = std::min(iters / 10, 1000L);
            double t0 = 0;
            for (long k = 0; k < warm + iters; ++k) {
                if (k == warm) t0 = now_us();
                c.send(0, size);
                int slot = c.recv();
                c.post_recv(slot);
                c.reap_send();
            }
            lat = (now_us() - t0) / iters / 2;
        }
        if (o.mode != "lat") {
            long n = std::max(
                16L, std::min(iters, static_cast<long>((1u << 30) / std::max<uint32_t>(size, 1))));
            double t0 = now_us();
            long credits = 2L * c.window;
            int inflight = 0;
            for (long k = 0; k <= n; ++k) {
                while (credits == 0) { // wait for the server to have reposted
                    int slot = c.recv();
                    credits += c.window;
                    c.post_recv(slot);
                }
                if (inflight == c.window) {
                    c.reap_send();
                    --inflight;
                }
                // The last message (2) asks for an answer.
                c.send(static_cast<int>(k % c.window), k < n ? size : 0, k < n ? 1 : 2);
                --credits;
                ++inflight;
            }
            while (inflight-- > 0) c.reap_send();
            for (;;) { // credits may still arrive before the answer
                int slot = c.recv();
                bool answer = !(c.rdesc[slot].CS.Status & VIP_STATUS_IMMEDIATE);
                c.post_recv(slot);
                if (answer) break;
            }
            bw = static_cast<double>(size) * n / (now_us() - t0);
        }
        printf("%-10u %14.3f %14.1f\n", size, lat, bw);
        fflush(stdout);
    }
    VipDisconnect(c.vi);
}

} // namespace

int main(int argc, char **argv) {
    Options o;
    int opt;
    while ((opt = getopt(argc, argv, "scfd:h:D:S:n:w:m:")) != -1) {
        switch (opt) {
        case 's':
        case 'c':
        case 'f':
            o.role = static_cast<char>(opt);
            break;
        case 'd':
            o.device = optarg;
            break;
        case 'h':
            o.host = optarg;
            break;
        case 'D':
            o.disc = optarg;
            break;
        case 'S': {
            o.sizes.clear();
            std::string list = optarg;
            size_t p = 0;
            while (p <= list.size()) {
                size_t q = list.find(',', p);
                if (q == std::string::npos) q = list.size();
                o.sizes.push_back(parse_size(list.substr(p, q - p).c_str()));
                p = q + 1;
            }
            break;
        }
        case 'n':
            o.iters = atol(optarg);
            break;
        case 'w':
            o.window = std::max(1, atoi(optarg));
            break;
        case 'm':
            o.mode = optarg;
            break;
        default:
            fprintf(stderr,
                    "usage: vipl-pingpong -s|-c|-f [-d device] [-h host] [-D disc] [-S sizes] "
                    "[-n iterations] [-w window] [-m lat|bw|both]\n");
            return 2;
        }
    }
    if (!o.role) {
        fprintf(stderr, "vipl-pingpong: choose -s (server), -c (client) or -f (both)\n");
        return 2;
    }
    if (o.role == 's') {
        serve(o);
        return 0;
    }
    if (o.role == 'f') {
        pid_t pid = fork();
        if (pid == 0) {
            o.role = 's';
            serve(o);
            _exit(0);
        }
        o.role = 'c';
        run_client(o);
        int status;
        waitpid(pid, &status, 0);
        return 0;
    }
    run_client(o);
    return 0;
}
