// Client-server and peer-to-peer connections, VipDisconnect.
#include "api/entry.h"
#include "core/clock.h"
#include "core/lifecycle.h"
#include "core/vi_guard.h"
#include "core/wait.h"
#include "prov/provider.h"

namespace vipl {

static bool valid_address(const Nic *nic, const VIP_NET_ADDRESS *a) {
    return a && a->DiscriminatorLen <= nic->attrs.MaxDiscriminatorLen &&
           a->HostAddressLen <= sizeof nic->address;
}

// Moves an Idle VI to Pending; false if it was not Idle.
static bool begin_connect(Vi *vi) {
    int idle = VIP_STATE_IDLE;
    return vi->state.compare_exchange_strong(idle, VIP_STATE_CONNECT_PENDING);
}

static VIP_RETURN end_connect(Vi *vi, const void *handle, VIP_RETURN rc) {
    ViGuard g(vi);
    if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
    if (rc == VIP_SUCCESS) {
        vi_connected_locked(vi);
    } else if (rc != VIP_NOT_DONE) {
        vi->peer_pending = false;
        if (vi->prov) vi->nic->ops->vi->disconnect(vi);
        vi->state.store(VIP_STATE_IDLE);
    }
    return rc;
}

extern "C" {

VIP_RETURN VipConnectWait(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr, VIP_ULONG Timeout,
                          VIP_NET_ADDRESS *RemoteAddr, VIP_VI_ATTRIBUTES *RemoteViAttribs,
                          VIP_CONN_HANDLE *ConnHandle) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !valid_address(nic, LocalAddr) || !RemoteAddr || !RemoteViAttribs ||
            !ConnHandle)
            return VIP_INVALID_PARAMETER;
        ConnReq *req = conns().create(UINT32_MAX, false);
        if (!req) return VIP_ERROR_RESOURCE;
        req->nic = nic;
        req->prov = nullptr;
        VIP_RETURN rc = nic->ops->nic->connect_wait(nic, LocalAddr, deadline_after_ms(Timeout), req,
                                                    RemoteAddr, RemoteViAttribs);
        if (rc != VIP_SUCCESS) {
            conns().release(req, true);
            return rc;
        }
        *ConnHandle = conns().handle_of(req);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipGetConnWaitFd(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr, int *Fd) {
    return api_call([&] {
        Nic *nic = find_nic(NicHandle);
        if (!nic || !valid_address(nic, LocalAddr) || !Fd) return VIP_INVALID_PARAMETER;
        return nic->ops->nic->connect_wait_fd(nic, LocalAddr, Fd);
    });
}

VIP_RETURN VipConnectAccept(VIP_CONN_HANDLE ConnHandle, VIP_VI_HANDLE ViHandle) {
    return api_call([&] {
        ConnReq *req = find_conn(ConnHandle);
        Vi *vi = find_vi(ViHandle);
        if (!req || !vi || vi->nic != req->nic) return VIP_INVALID_PARAMETER;
        if (!begin_connect(vi)) return VIP_INVALID_STATE;
        VIP_RETURN rc = req->nic->ops->nic->connect_accept(req, vi);
        rc = end_connect(vi, ViHandle, rc);
        // A refused match (attributes) leaves the request for another try.
        bool keep = rc == VIP_INVALID_RELIABILITY_LEVEL || rc == VIP_INVALID_MTU ||
                    rc == VIP_INVALID_RDMAREAD || rc == VIP_INVALID_PARAMETER;
        if (!keep && conns().still(req, ConnHandle)) {
            req->nic->ops->nic->conn_free(req);
            conns().release(req, true);
        }
        return rc;
    });
}

VIP_RETURN VipConnectReject(VIP_CONN_HANDLE ConnHandle) {
    return api_call([&] {
        ConnReq *req = find_conn(ConnHandle);
        if (!req) return VIP_INVALID_PARAMETER;
        VIP_RETURN rc = req->nic->ops->nic->connect_reject(req);
        req->nic->ops->nic->conn_free(req);
        conns().release(req, true);
        return rc;
    });
}

VIP_RETURN VipConnectRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                             VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout,
                             VIP_VI_ATTRIBUTES *RemoteViAttribs) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !valid_address(vi->nic, LocalAddr) || !valid_address(vi->nic, RemoteAddr) ||
            !RemoteViAttribs)
            return VIP_INVALID_PARAMETER;
        if (!begin_connect(vi)) return VIP_INVALID_STATE;
        VIP_RETURN rc = vi->nic->ops->vi->connect_request(
            vi, LocalAddr, RemoteAddr, deadline_after_ms(Timeout), RemoteViAttribs);
        return end_connect(vi, ViHandle, rc);
    });
}

VIP_RETURN VipDisconnect(VIP_VI_HANDLE ViHandle) {
    return locked_vi_call(ViHandle, true, [&](Vi *vi) {
        if (vi->state.load() == VIP_STATE_IDLE) return VIP_INVALID_STATE;
        vi_disconnect_locked(vi);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipConnectPeerRequest(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                                 VIP_NET_ADDRESS *RemoteAddr, VIP_ULONG Timeout) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !valid_address(vi->nic, LocalAddr) || !valid_address(vi->nic, RemoteAddr))
            return VIP_INVALID_PARAMETER;
        if (!begin_connect(vi)) return VIP_INVALID_STATE;
        VIP_RETURN rc =
            vi->nic->ops->vi->peer_request(vi, LocalAddr, RemoteAddr, deadline_after_ms(Timeout));
        if (rc == VIP_SUCCESS) {
            ViGuard g(vi);
            vi->peer_pending = true;
            return VIP_SUCCESS;
        }
        return end_connect(vi, ViHandle, rc);
    });
}

static VIP_RETURN peer_step(Vi *vi, const void *handle, VIP_VI_ATTRIBUTES *attrs, bool block) {
    for (;;) {
        pollfd fds[4];
        int n = 0;
        uint64_t deadline = kNoDeadline;
        VIP_RETURN rc;
        {
            ViGuard g(vi);
            if (!vis().still(vi, handle)) return VIP_INVALID_PARAMETER;
            if (!vi->peer_pending) {
                if (vi->state.load() == VIP_STATE_CONNECTED) return VIP_SUCCESS;
                return VIP_INVALID_STATE;
            }
            rc = vi->nic->ops->vi->peer_progress(vi, attrs, fds, &n, &deadline);
        }
        if (rc != VIP_NOT_DONE) return end_connect(vi, handle, rc);
        if (!block) return VIP_NOT_DONE;
        PollResult pr = poll_until(fds, n, deadline);
        if (pr == PollResult::interrupted) return VIP_INTERRUPTED;
    }
}

VIP_RETURN VipConnectPeerDone(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *RemoteViAttribs) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !RemoteViAttribs) return VIP_INVALID_PARAMETER;
        return peer_step(vi, ViHandle, RemoteViAttribs, false);
    });
}

VIP_RETURN VipConnectPeerWait(VIP_VI_HANDLE ViHandle, VIP_VI_ATTRIBUTES *RemoteViAttribs) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !RemoteViAttribs) return VIP_INVALID_PARAMETER;
        return peer_step(vi, ViHandle, RemoteViAttribs, true);
    });
}

} // extern "C"
} // namespace vipl
