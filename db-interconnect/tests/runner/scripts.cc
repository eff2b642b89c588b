#include "scripts.h"

#include "mode.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <sstream>
#include <thread>

namespace dbt {

Proc echo_server(const Endpoint &e, Spawn base, const std::string &mode) {
    base.argv = script("echo_server.py");
    for (const std::string &a : e.args()) base.argv.push_back(a);
    if (!mode.empty()) {
        base.argv.push_back("--mode");
        base.argv.push_back(mode);
    }
    base.out_pipe = true;
    Proc p(base);
    INFO("echo server output: " << p.output());
    p.require_output("listening", 10000);
    wait_listening(e, base.preload && preloaded(), 10000, p.pid());
    return p;
}

Proc logging_echo_server(const Endpoint &e, const TempDir &dir, int log_level) {
    Spawn s;
    s.preload = true;
    s.env = {"VIPL_DB_LOG=" + std::to_string(log_level)};
    s.err = dir / "server.err";
    return echo_server(e, s);
}

Spawn preloaded_script(const std::string &name, const Endpoint &e,
                       const std::vector<std::string> &args, std::vector<std::string> env,
                       const std::string &err) {
    Spawn s;
    s.argv = script(name);
    for (const std::string &a : e.args()) s.argv.push_back(a);
    s.argv.insert(s.argv.end(), args.begin(), args.end());
    s.preload = true;
    s.env = std::move(env);
    s.out_pipe = true;
    s.err = err;
    return s;
}

std::map<std::string, long> stop_echo_server(Proc &p) {
    p.signal(SIGTERM);
    int st = p.wait(10000);
    INFO("echo server output: " << p.output());
    REQUIRE(st == 0);
    std::map<std::string, long> m;
    std::istringstream in(p.output());
    std::string word;
    while (in >> word) {
        size_t eq = word.find('=');
        if (eq != std::string::npos) m[word.substr(0, eq)] = std::atol(word.c_str() + eq + 1);
    }
    REQUIRE(m.count("connections") == 1);
    return m;
}

EchoClients start_echo_clients(const Endpoint &e, const TempDir &dir, int n, size_t size,
                               uint64_t seed, Spawn base) {
    std::string in_dir = dir / ("in-" + std::to_string(seed));
    std::string out_dir = dir / ("out-" + std::to_string(seed));
    REQUIRE(mkdir(in_dir.c_str(), 0755) == 0);
    REQUIRE(mkdir(out_dir.c_str(), 0777) == 0);
    chmod(out_dir.c_str(), 0777); // the umask took some: another user writes here
    EchoClients c;
    for (int i = 0; i < n; ++i) {
        c.in.push_back(in_dir + "/in" + std::to_string(i));
        c.out.push_back(out_dir + "/out" + std::to_string(i));
        write_file(c.in.back(), random_bytes(size, seed * 1000 + static_cast<uint64_t>(i)));
    }
    base.argv = script("threaded_client.py");
    for (const std::string &a : e.args()) base.argv.push_back(a);
    for (const std::string &a :
         {std::string("--connections"), std::to_string(n), std::string("--in-dir"), in_dir,
          std::string("--out-dir"), out_dir})
        base.argv.push_back(a);
    base.in_pipe = true;
    base.out_pipe = true;
    c.proc = Proc(base);
    c.proc.require_output("holding", 30000);
    return c;
}

void finish_echo_clients(EchoClients &c) {
    c.proc.write_in("go\n");
    int st = c.proc.wait(15000);
    INFO("threaded client output: " << c.proc.output());
    REQUIRE(st == 0);
    for (size_t i = 0; i < c.in.size(); ++i) require_same_file(c.in[i], c.out[i]);
}

SocatClients start_socat_clients(const Endpoint &e, const TempDir &dir, int n, size_t size,
                                 uint64_t seed, Spawn base) {
    std::string tag = "socat-" + std::to_string(seed);
    std::string out_dir = dir / tag;
    REQUIRE(mkdir(out_dir.c_str(), 0777) == 0);
    chmod(out_dir.c_str(), 0777); // the umask took some: another user writes here
    SocatClients c;
    base.argv = {"socat", "-b", "65536", "-t", "10", "STDIO", e.socat_connect()};
    base.in_pipe = true;
    for (int i = 0; i < n; ++i) {
        c.in.push_back(dir / (tag + "-in" + std::to_string(i)));
        c.out.push_back(out_dir + "/out" + std::to_string(i));
        write_file(c.in.back(), random_bytes(size, seed * 1000 + static_cast<uint64_t>(i)));
        base.out = c.out.back();
        c.procs.emplace_back(base);
    }
    for (int i = 0; i < n; ++i) {
        if (c.procs[i].write_in(read_file(c.in[i]))) continue;
        std::string got;
        for (int k = 0; k < n; ++k) got += " " + std::to_string(file_size(c.out[k]));
        FAIL("socat client " << i << " stopped taking its " << size
                             << " bytes within 10 s; bytes echoed to each client so far:" << got);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int i = 0; i < n; ++i) {
        while (file_size(c.out[i]) < size && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        INFO("socat client " << i << " got " << file_size(c.out[i]) << " of " << size
                             << " bytes back");
        REQUIRE(file_size(c.out[i]) == size);
    }
    return c;
}

std::vector<StatRow> stat_of(SocatClients &c, size_t n, const std::string &trans) {
    std::vector<int> pids;
    for (Proc &p : c.procs) pids.push_back(p.pid());
    return when_riding([&] { return stat_rows(pids); }, "client", n, trans);
}

void finish_socat_clients(SocatClients &c) {
    for (Proc &p : c.procs) p.close_in();
    for (size_t i = 0; i < c.procs.size(); ++i) {
        REQUIRE(c.procs[i].wait(15000) == 0);
        require_same_file(c.in[i], c.out[i]);
    }
}

void finish_socat_echo(SocatClients &c, Proc &server, size_t echoed) {
    finish_socat_clients(c);
    auto summary = stop_echo_server(server);
    REQUIRE(summary["echoed"] == static_cast<long>(echoed));
}

} // namespace dbt
