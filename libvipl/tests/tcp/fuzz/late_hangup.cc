// The notification thread is never stopped: it runs on while exit()
// destroys static objects, and must find its state intact then.  Here the
// peer of a connected VI hangs up after the static destructors have run (a
// destructor function runs after them), while an error callback and a
// Notify handler are registered: the thread wakes, reports the hang-up and
// walks its lists.  Built with AddressSanitizer, so a use of destroyed state
// fails the run (it once did: the thread's lists were a static object).
#include "../raw_peer.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <cstdio>
#include <unistd.h>

namespace {

vt::RawPeer *g_peer;

void on_recv(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {}
void on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {}

__attribute__((destructor)) void hang_up_late() {
    if (!g_peer) return;
    g_peer->close();
    usleep(300000); // the thread wakes and runs its loop meanwhile
}

int fail(const char *what, VIP_RETURN rc = VIP_SUCCESS) {
    fprintf(stderr, "late_hangup: %s %s\n", what, VipReturnString(rc));
    return 1;
}

} // namespace

int main() {
    setenv("VIPL_LOG_LEVEL", "error", 0);
    VIP_NIC_HANDLE nic;
    VIP_PROTECTION_HANDLE ptag;
    VIP_RETURN rc = VipOpenNic("tcp:127.0.0.1", &nic);
    if (rc != VIP_SUCCESS) return fail("VipOpenNic", rc);
    if ((rc = VipCreatePtag(nic, &ptag)) != VIP_SUCCESS) return fail("VipCreatePtag", rc);
    if ((rc = VipErrorCallback(nic, nullptr, on_error)) != VIP_SUCCESS)
        return fail("VipErrorCallback", rc);
    uint16_t port = vt::raw_listen(nic);
    if (!port) return fail("no port");
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    a.MaxTransferSize = 4096;
    a.Ptag = ptag;
    VIP_VI_HANDLE vi;
    if ((rc = VipCreateVi(nic, &a, nullptr, nullptr, &vi)) != VIP_SUCCESS)
        return fail("VipCreateVi", rc);
    g_peer = new vt::RawPeer;
    std::string why = g_peer->connect(nic, vi, port, 5000);
    if (!why.empty()) return fail(why.c_str());
    if ((rc = VipRecvNotify(vi, nullptr, on_recv)) != VIP_SUCCESS) return fail("VipRecvNotify", rc);
    return 0;
}
