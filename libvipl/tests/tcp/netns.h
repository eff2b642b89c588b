// Two "hosts" on one machine for fault tests of the tcp provider: two
// network namespaces joined through a switch, and processes of this test
// program running inside them, driven line by line over a socket.
//
// Needs root and iproute2 (`ip`).  Everything is made with a name that
// carries the creating process's pid ("vipl-tf<pid>-<n>a"), removed by the
// destructor, and, should a run die before that, by the next run: a
// namespace whose creator is gone is deleted when a new pair is made.  The
// veth ends are created inside the namespaces, so nothing is ever left in
// the machine's own namespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vt {

// CLOCK_MONOTONIC in nanoseconds: one clock for every process of a test.
uint64_t mono_ns();

// Runs argv[0] (looked up in PATH, then /usr/sbin and /sbin) without a
// shell, waiting up to timeout_ms; returns its exit code, or -1 if it could
// not run, died of a signal or was killed at the bound.  Its stdout and
// stderr go to *output when given.
int run_command(const std::vector<std::string> &argv, std::string *output = nullptr,
                int timeout_ms = 10000);

// Waits for the child pid until deadline_ns (mono_ns()), killing it then;
// its waitpid status, or -1 after killing it.
int reap(int pid, uint64_t deadline_ns);

// Why namespaces cannot be made here ("" when they can): not root, no `ip`.
std::string netns_unavailable();

// Two namespaces, side 0 and side 1, each with loopback up and one end of
// a veth pair ("vf0", "vf1") at 10.A.B.1/24 and 10.A.B.2/24 (A and B from
// the pid).  The other ends are ports of a bridge in a third namespace, the
// switch.  Each side knows the other's MAC address permanently, so no
// address resolution ever fails or has to happen again.
//
// Taking the switch down makes the link silent: both ends keep their
// carrier and send as usual, every frame vanishes in the switch, nothing
// answers and nothing resets, as when a cable or switch fails between two
// hosts.  (Taking a veth end down instead would drop the other end's
// carrier, and its kernel would stop transmitting locally, which is not
// what a remote failure looks like.)
//
// netns.cc needs no Catch2 (programs that are not Catch2 tests use it
// through the vipl-test-netns library); the members that REQUIRE are in
// netns_side.cc.
class NetnsPair {
public:
    NetnsPair(); // REQUIREs success; removes what it made on failure
    // Reports a failure in *error instead (ok() is then false); nothing made stays.
    explicit NetnsPair(std::string *error);
    ~NetnsPair(); // removes the namespaces (and with them the veth pairs)
    NetnsPair(const NetnsPair &) = delete;
    NetnsPair &operator=(const NetnsPair &) = delete;

    bool ok() const { return ok_; }
    const std::string &name(int side) const { return ns_[side]; }
    // The namespace's file ("/run/netns/<name>"), for setns(2).
    std::string path(int side) const;
    const std::string &address(int side) const { return addr_[side]; }
    // "tcp:<address>": the device a process on that side opens.
    std::string device(int side) const { return "tcp:" + addr_[side]; }

    // Takes the switch down (the link goes silent) or up again; REQUIREs success.
    void set_link(bool up);
    bool set_link(bool up, std::string *error);

    // Deletes namespaces with our prefix whose creating process is gone.
    static void remove_stale();

private:
    bool make(std::string *error);
    bool ip(int ns, const std::vector<std::string> &args, std::string *error);
    void remove();
    static constexpr int kSwitch = 2;
    std::string ns_[3], addr_[2], mac_[2];
    bool made_[3] = {false, false, false};
    bool ok_ = false;
};

// Lines of text both ways over one stream socket between the test and a
// side (a socket, not pipes: writing to a side that died must not raise
// SIGPIPE in the test).
class LineChannel {
public:
    LineChannel() = default;
    explicit LineChannel(int fd) : fd_(fd) {}
    ~LineChannel();
    LineChannel(LineChannel &&o) noexcept;
    LineChannel &operator=(LineChannel &&o) noexcept;
    LineChannel(const LineChannel &) = delete;
    LineChannel &operator=(const LineChannel &) = delete;

    void say(const std::string &line);
    // The next line (without its newline); nullopt on timeout or end of file.
    std::optional<std::string> hear(int timeout_ms);

private:
    int fd_ = -1;
    std::string buf_;
};

// The descriptor a side process finds its channel on.
constexpr int kSideFd = 100;

// A copy of this test program running the hidden test case `test_name`
// inside a namespace, with `env` ("KEY=VALUE") added to its environment: a
// new program reads the VIPL_* configuration afresh.  The destructor kills
// it if it still runs.
class Side {
public:
    Side(const NetnsPair &net, int side, const std::string &test_name,
         const std::vector<std::string> &env);
    ~Side();
    Side(const Side &) = delete;
    Side &operator=(const Side &) = delete;

    // Waits for a line starting with `word` and returns the numbers after
    // it; FAILs (with what the side said instead) on timeout, end of file
    // or another word.
    std::vector<int64_t> expect(const std::string &word, int timeout_ms = 10000);
    void say(const std::string &line) { ch_.say(line); }
    // Waits up to timeout_ms for the process to end: its waitpid status,
    // or -1 after killing it.
    int wait(int timeout_ms = 10000);
    int pid() const { return pid_; }
    const std::string &label() const { return label_; }

private:
    int pid_ = -1;
    std::string label_;
    LineChannel ch_;
};

// In a side process: the channel to the test.
LineChannel &side_channel();

} // namespace vt
