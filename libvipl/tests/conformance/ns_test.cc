// Name service (VipNSInit, VipNSGetHostByName, VipNSGetHostByAddr,
// VipNSShutdown) and VipQuerySystemManagementInfo.
#include "support.h"

#include <cstring>
#include <unistd.h>

namespace {

bool is_this_host(const vt::Nic &n, const VIP_NET_ADDRESS *a) {
    return a->HostAddressLen == n.attrs.NicAddressLen &&
           memcmp(a->HostAddress, n.attrs.LocalNicAddress, n.attrs.NicAddressLen) == 0;
}

std::string host_name() {
    char h[256] = {};
    REQUIRE(gethostname(h, sizeof h - 1) == 0);
    return h;
}

} // namespace

TEST_CASE("VipNSInit and VipNSShutdown", "[ns]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    int info = 0;
    CHECK(VipNSInit(n.nic, nullptr) == VIP_SUCCESS);
    CHECK(VipNSInit(n.nic, &info) == VIP_SUCCESS);
    CHECK(VipNSShutdown(n.nic) == VIP_SUCCESS);
    // The name service still answers after a shutdown and a new init.
    CHECK(VipNSInit(n.nic, nullptr) == VIP_SUCCESS);
    vt::AddressBuffer a;
    CHECK(VipNSGetHostByName(n.nic, const_cast<char *>("localhost"), a.get(), 0) == VIP_SUCCESS);
    CHECK(VipNSShutdown(n.nic) == VIP_SUCCESS);
    CHECK(VipNSInit(nullptr, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipNSShutdown(nullptr) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles()) {
        CHECK(VipNSInit(h, nullptr) == VIP_INVALID_PARAMETER);
        CHECK(VipNSShutdown(h) == VIP_INVALID_PARAMETER);
    }
}

TEST_CASE("This host's names resolve to the NIC's own address", "[ns]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    std::vector<std::string> names = {"localhost", "127.0.0.1", "::1", host_name()};
    for (const std::string &name : names) {
        INFO("name " << name);
        vt::AddressBuffer a;
        memset(a.bytes.data(), 0xab, a.bytes.size());
        REQUIRE(VipNSGetHostByName(n.nic, const_cast<char *>(name.c_str()), a.get(), 0) ==
                VIP_SUCCESS);
        CHECK(is_this_host(n, a.get()));
        CHECK(a.get()->DiscriminatorLen == 0);
    }
}

TEST_CASE("Unknown names give VIP_ERROR_NAMESERVICE", "[ns]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::AddressBuffer a;
    memset(a.bytes.data(), 0xab, a.bytes.size());
    std::vector<uint8_t> before = a.bytes;
    for (const char *name : {"no-such-host.invalid", "vipl-test-unknown-host.invalid"})
        CHECK(VipNSGetHostByName(n.nic, const_cast<char *>(name), a.get(), 0) ==
              VIP_ERROR_NAMESERVICE);
    // Indexes past the last address of a name are unknown too.
    VIP_ULONG index = 0;
    VIP_RETURN rc = VIP_SUCCESS;
    vt::AddressBuffer b;
    while (rc == VIP_SUCCESS && index < 64)
        rc = VipNSGetHostByName(n.nic, const_cast<char *>("localhost"), b.get(), index++);
    CHECK(rc == VIP_ERROR_NAMESERVICE);
    CHECK(index >= 2); // index 0 resolved
    // Output written only on success.
    CHECK(a.bytes == before);
}

TEST_CASE("VipNSGetHostByName checks its arguments", "[ns][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::AddressBuffer a;
    char *name = const_cast<char *>("localhost");
    CHECK(VipNSGetHostByName(n.nic, nullptr, a.get(), 0) == VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByName(n.nic, name, nullptr, 0) == VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByName(nullptr, name, a.get(), 0) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles())
        CHECK(VipNSGetHostByName(h, name, a.get(), 0) == VIP_INVALID_PARAMETER);
}

TEST_CASE("VipNSGetHostByAddr names this host and says how much room it needs", "[ns]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::AddressBuffer a;
    REQUIRE(VipNSGetHostByName(n.nic, const_cast<char *>("localhost"), a.get(), 0) == VIP_SUCCESS);
    // With a discriminator appended (as programs do) the host part still counts.
    a.get()->DiscriminatorLen = 3;
    memcpy(a.get()->HostAddress + a.get()->HostAddressLen, "abc", 3);

    char name[512];
    memset(name, '#', sizeof name);
    VIP_ULONG len = sizeof name;
    REQUIRE(VipNSGetHostByAddr(n.nic, a.get(), name, &len) == VIP_SUCCESS);
    REQUIRE(memchr(name, 0, sizeof name) != nullptr);
    size_t need = strlen(name) + 1;
    CHECK(len == need);
    CHECK(need > 1);
    // The name resolves back to the same address.
    vt::AddressBuffer back;
    REQUIRE(VipNSGetHostByName(n.nic, name, back.get(), 0) == VIP_SUCCESS);
    CHECK(is_this_host(n, back.get()));

    // Too small: VIP_ERROR_RESOURCE, the size needed, nothing written past the buffer.
    for (VIP_ULONG small : {VIP_ULONG(0), VIP_ULONG(1), VIP_ULONG(need - 1)}) {
        INFO("buffer of " << small);
        char tiny[512];
        memset(tiny, '#', sizeof tiny);
        VIP_ULONG l = small;
        CHECK(VipNSGetHostByAddr(n.nic, a.get(), tiny, &l) == VIP_ERROR_RESOURCE);
        CHECK(l == need);
        for (size_t i = small; i < sizeof tiny; ++i)
            if (tiny[i] != '#') FAIL("byte " << i << " written past the " << small << " given");
    }
    // Exactly enough.
    char exact[512];
    VIP_ULONG l = need;
    CHECK(VipNSGetHostByAddr(n.nic, a.get(), exact, &l) == VIP_SUCCESS);
    CHECK(l == need);
    CHECK(strcmp(exact, name) == 0);
}

TEST_CASE("VipNSGetHostByAddr refuses unknown addresses and bad arguments", "[ns][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::AddressBuffer a;
    REQUIRE(VipNSGetHostByName(n.nic, const_cast<char *>("localhost"), a.get(), 0) == VIP_SUCCESS);
    char name[256];
    VIP_ULONG len = sizeof name;
    CHECK(VipNSGetHostByAddr(n.nic, nullptr, name, &len) == VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByAddr(n.nic, a.get(), nullptr, &len) == VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByAddr(n.nic, a.get(), name, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipNSGetHostByAddr(nullptr, a.get(), name, &len) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipNSGetHostByAddr(h, a.get(), name, &len) == VIP_INVALID_PARAMETER);
    vt::AddressBuffer other = a;
    for (int i = 0; i < other.get()->HostAddressLen; ++i) other.get()->HostAddress[i] ^= 0x5a;
    len = sizeof name;
    CHECK(VipNSGetHostByAddr(n.nic, other.get(), name, &len) == VIP_ERROR_NAMESERVICE);
}

TEST_CASE("Auto-discovery lists this host", "[ns][smi]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    // First ask with no room: the call says how many entries it needs.
    VIP_AUTODISCOVERY_LIST list{};
    list.NumAdAddrs = 0;
    list.ADAddrArray = nullptr;
    REQUIRE(VipQuerySystemManagementInfo(n.nic, VIP_SMI_AUTODISCOVERY, &list) ==
            VIP_ERROR_RESOURCE);
    VIP_ULONG count = list.NumAdAddrs;
    REQUIRE(count >= 1);
    REQUIRE(count < 100000);
    std::vector<vt::AddressBuffer> bufs(count);
    std::vector<VIP_NET_ADDRESS *> ptrs;
    for (auto &b : bufs) ptrs.push_back(b.get());
    list.ADAddrArray = ptrs.data();
    list.NumAdAddrs = count;
    REQUIRE(VipQuerySystemManagementInfo(n.nic, VIP_SMI_AUTODISCOVERY, &list) == VIP_SUCCESS);
    CHECK(list.NumAdAddrs >= 1);
    CHECK(list.NumAdAddrs <= count);
    bool self = false;
    for (VIP_ULONG i = 0; i < list.NumAdAddrs && i < count; ++i) {
        CHECK(ptrs[i]->HostAddressLen == n.attrs.NicAddressLen);
        self |= is_this_host(n, ptrs[i]);
    }
    CHECK(self);
}

TEST_CASE("VipQuerySystemManagementInfo checks its arguments", "[ns][smi][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    vt::AddressBuffer b;
    VIP_NET_ADDRESS *ptr = b.get();
    VIP_AUTODISCOVERY_LIST list{0, &ptr, 1};
    CHECK(VipQuerySystemManagementInfo(n.nic, VIP_SMI_AUTODISCOVERY, nullptr) ==
          VIP_INVALID_PARAMETER);
    CHECK(VipQuerySystemManagementInfo(nullptr, VIP_SMI_AUTODISCOVERY, &list) ==
          VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipQuerySystemManagementInfo(h, VIP_SMI_AUTODISCOVERY, &list) ==
              VIP_INVALID_PARAMETER);
    for (VIP_ULONG type : {VIP_ULONG(0), VIP_ULONG(2), VIP_ULONG(0xffff)})
        CHECK(VipQuerySystemManagementInfo(n.nic, type, &list) == VIP_ERROR_NOT_SUPPORTED);
}
