// Table 3 of the paper: omniORB round trips over giop:tcp, giop:unix and giop:vipl.
//   bench-orb --transport tcp|unix|vipl --placement cross|same [--iters N] [--server PATH]
//   bench-orb --transport tcp|vipl --ior FILE [--iters N]
// Starts orb-echo-server (pinned: CPU 1 across cores, CPU 0 on the same core), pins
// itself to CPU 0, and prints CSV rows: benchmark,transport,placement,size,value,unit,iterations
// (rt_p50 in us for a null call and a 1024 B bounce, calls_per_s for null calls).
// --ior: the server runs elsewhere (another host or container) and wrote its IOR into
// FILE; placement `hosts`, nothing pinned.
#include "echo.hh"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

double us_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

int main(int argc, char **argv) {
    std::string transport = "vipl", placement = "cross", server = ORB_ECHO_SERVER, ior_file;
    int iters = 5000;
    for (int i = 1; i < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--help" || i + 1 == argc) {
            fprintf(stderr,
                    "usage: %s [--transport tcp|unix|vipl] [--placement cross|same] "
                    "[--iters N] [--server PATH | --ior FILE]\n",
                    argv[0]);
            return k == "--help" ? 0 : 2;
        }
        if (k == "--transport")
            transport = argv[i + 1];
        else if (k == "--placement")
            placement = argv[i + 1];
        else if (k == "--iters")
            iters = atoi(argv[i + 1]);
        else if (k == "--server")
            server = argv[i + 1];
        else if (k == "--ior")
            ior_file = argv[i + 1];
    }
    alarm(120);
    std::string sock = "/tmp/orb-bench-" + std::to_string(getpid());
    std::string ep = transport == "tcp"    ? "giop:tcp:127.0.0.1:0"
                     : transport == "unix" ? "giop:unix:" + sock
                                           : "giop:vipl::0";
    int p[2];
    if (!ior_file.empty()) {
        placement = "hosts";
        p[0] = open(ior_file.c_str(), O_RDONLY | O_CLOEXEC);
        if (p[0] < 0) {
            fprintf(stderr, "bench-orb: %s: %s\n", ior_file.c_str(), strerror(errno));
            return 1;
        }
    } else if (pipe(p) != 0) {
        return 1;
    }
    pid_t pid = ior_file.empty() ? fork() : -1;
    if (ior_file.empty() && pid < 0) return 1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); // a client that dies (an exception) takes it along
        pin(placement == "same" ? 0 : 1);
        dup2(p[1], 1);
        setenv("OMNIORB_CONFIG", "/dev/null", 1);
        execl(server.c_str(), server.c_str(), "-ORBendPoint", ep.c_str(), nullptr);
        _exit(127);
    }
    if (pid > 0) {
        close(p[1]);
        pin(0);
    }
    std::string ior;
    char c;
    while (read(p[0], &c, 1) == 1 && c != '\n') ior += c;
    if (ior.rfind("IOR:", 0) != 0) return 1;

    setenv("OMNIORB_CONFIG", "/dev/null", 1);
    std::string rule = "* " + transport;
    const char *orb_argv[] = {argv[0], "-ORBclientTransportRule", rule.c_str(), nullptr};
    int orb_argc = 3;
    CORBA::ORB_var orb = CORBA::ORB_init(orb_argc, const_cast<char **>(orb_argv));
    CORBA::Object_var obj = orb->string_to_object(ior.c_str());
    EchoTest::Echo_var e = EchoTest::Echo::_narrow(obj);
    EchoTest::Bytes kib;
    kib.length(1024);
    memset(kib.get_buffer(), 0x5a, 1024);
    for (int i = 0; i < 200; ++i) e->ping(); // warm up

    std::vector<double> null_rt, kib_rt;
    auto t_all = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        e->ping();
        null_rt.push_back(us_since(t0));
    }
    double calls_per_s = iters / (us_since(t_all) / 1e6);
    for (int i = 0; i < iters; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        EchoTest::Bytes_var out = e->bounce(kib);
        kib_rt.push_back(us_since(t0));
    }
    auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
    };
    printf("rt_p50,giop:%s,%s,0,%.2f,us,%d\n", transport.c_str(), placement.c_str(),
           median(null_rt), iters);
    printf("rt_p50,giop:%s,%s,1024,%.2f,us,%d\n", transport.c_str(), placement.c_str(),
           median(kib_rt), iters);
    printf("calls_per_s,giop:%s,%s,0,%.0f,calls/s,%d\n", transport.c_str(), placement.c_str(),
           calls_per_s, iters);
    fflush(stdout);
    orb->destroy();
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }
    if (transport == "unix") unlink(sock.c_str()); // the killed server leaves its socket
    return 0;
}
