// The case guard (support/case_guard.h) that every test program runs: a case
// that leaves something behind or makes the library log an error it did not
// announce fails; one that cleans up, or only starts what the library keeps
// for the whole process, passes.  Each kind runs as its own fresh process.
#include "case_guard.h"
#include "procs.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

namespace {

// VipCreateVi on a process out of descriptors: its eventfd fails, which the
// library logs as an error.  Returns the call's code.
VIP_RETURN create_vi_without_descriptors() {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    REQUIRE(VipOpenNic("shm0", &nic) == VIP_SUCCESS);
    REQUIRE(VipCreatePtag(nic, &ptag) == VIP_SUCCESS);
    rlimit saved;
    REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    int top = fcntl(0, F_DUPFD_CLOEXEC, 0); // the lowest free descriptor
    REQUIRE(top >= 0);
    close(top);
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(top);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    a.Ptag = ptag;
    a.MaxTransferSize = 4096;
    VIP_VI_HANDLE vi = nullptr;
    VIP_RETURN rc = VipCreateVi(nic, &a, nullptr, nullptr, &vi);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    if (rc == VIP_SUCCESS) VipDestroyVi(vi);
    VipDestroyPtag(nic, ptag);
    VipCloseNic(nic);
    return rc;
}

void ignore_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {}

} // namespace

TEST_CASE("guard child: keeps a descriptor", "[.]") {
    REQUIRE(open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0);
}

TEST_CASE("guard child: leaves a thread", "[.]") {
    std::thread([] { sleep(5); }).detach();
    REQUIRE(true);
}

TEST_CASE("guard child: the library logs an error nobody announced", "[.]") {
    REQUIRE(create_vi_without_descriptors() == VIP_ERROR_RESOURCE);
}

TEST_CASE("guard child: the library logs an announced error", "[.]") {
    vt::expect_logged("VipCreateVi: eventfd");
    REQUIRE(create_vi_without_descriptors() == VIP_ERROR_RESOURCE);
}

TEST_CASE("guard child: a case that cleans up after starting the notification thread", "[.]") {
    VIP_NIC_HANDLE nic = nullptr;
    REQUIRE(VipOpenNic("shm0", &nic) == VIP_SUCCESS);
    REQUIRE(VipErrorCallback(nic, nullptr, ignore_error) == VIP_SUCCESS);
    REQUIRE(vt::thread_count() == 2);
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    close(fd);
    std::thread([] {}).join();
    REQUIRE(VipCloseNic(nic) == VIP_SUCCESS);
}

TEST_CASE("The case guard fails a case that leaves a descriptor or a thread or an error it did "
          "not announce",
          "[shm][guard]") {
    struct Kind {
        const char *name;
        bool fails;
    };
    for (Kind k :
         {Kind{"guard child: keeps a descriptor", true}, Kind{"guard child: leaves a thread", true},
          Kind{"guard child: the library logs an error nobody announced", true},
          Kind{"guard child: the library logs an announced error", false},
          Kind{"guard child: a case that cleans up after starting the notification "
               "thread",
               false}}) {
        int status = vt::run_fresh(k.name, {}, 60);
        INFO(k.name << ": " << vt::status_text(status));
        REQUIRE(WIFEXITED(status));
        CHECK((WEXITSTATUS(status) != 0) == k.fails);
    }
}
