/*
 * Written the way programs for the Intel VIPL header were: IN/OUT markers,
 * VIP_PVOID64 Address, descriptors in registered memory, Wait with VIP_INFINITE.
 * It compiles against the installed header and runs a loopback exchange.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <vipl.h>

static void check(VIP_RETURN rc, const char *what) {
    if (rc != VIP_SUCCESS) {
        fprintf(stderr, "%s failed: %d\n", what, (int)rc);
        exit(1);
    }
}

static int run(int server, IN const char *disc) {
    VIP_NIC_HANDLE nic;
    VIP_NIC_ATTRIBUTES attrs;
    VIP_PROTECTION_HANDLE ptag;
    VIP_MEM_ATTRIBUTES memattrs;
    VIP_VI_ATTRIBUTES viattrs, remote;
    VIP_VI_HANDLE vi;
    VIP_MEM_HANDLE mh;
    VIP_DESCRIPTOR *desc, *done;
    char *buf;
    char local_buf[64], remote_buf[64];
    VIP_NET_ADDRESS *local = (VIP_NET_ADDRESS *)local_buf, *peer = (VIP_NET_ADDRESS *)remote_buf;
    void *mem;

    check(VipOpenNic("shm0", &nic), "VipOpenNic");
    check(VipQueryNic(nic, &attrs), "VipQueryNic");
    check(VipCreatePtag(nic, &ptag), "VipCreatePtag");
    if (posix_memalign(&mem, VIP_DESCRIPTOR_ALIGNMENT, 4096)) return 1;
    memset(mem, 0, 4096);
    memattrs.Ptag = ptag;
    memattrs.EnableRdmaWrite = VIP_FALSE;
    memattrs.EnableRdmaRead = VIP_FALSE;
    memattrs.Shareable = VIP_FALSE; /* the extension's trailing field: VIPL 1.0 behaviour */
    check(VipRegisterMem(nic, mem, 4096, &memattrs, &mh), "VipRegisterMem");
    viattrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    viattrs.MaxTransferSize = 1024;
    viattrs.QoS = NULL;
    viattrs.Ptag = ptag;
    viattrs.EnableRdmaWrite = VIP_FALSE;
    viattrs.EnableRdmaRead = VIP_FALSE;
    viattrs.Shareable = VIP_FALSE;
    check(VipCreateVi(nic, &viattrs, NULL, NULL, &vi), "VipCreateVi");

    /* The server builds its own address from LocalNicAddress. */
    local->HostAddressLen = attrs.NicAddressLen;
    memcpy(local->HostAddress, attrs.LocalNicAddress, attrs.NicAddressLen);
    local->DiscriminatorLen = (VIP_UINT16)strlen(disc);
    memcpy(local->HostAddress + local->HostAddressLen, disc, strlen(disc));

    desc = (VIP_DESCRIPTOR *)mem;
    buf = (char *)mem + 1024;
    desc->CS.Control = VIP_CONTROL_OP_SENDRECV;
    desc->CS.SegCount = 1;
    desc->CS.Length = 64;
    desc->DS[0].Local.Data.Address = buf;
    desc->DS[0].Local.Handle = mh;
    desc->DS[0].Local.Length = 64;
    if (server) {
        VIP_CONN_HANDLE conn;
        check(VipPostRecv(vi, desc, mh), "VipPostRecv");
        check(VipConnectWait(nic, local, 10000, peer, &remote, &conn), "VipConnectWait");
        check(VipConnectAccept(conn, vi), "VipConnectAccept");
        check(VipRecvWait(vi, VIP_INFINITE, &done), "VipRecvWait");
        if (done != desc || done->CS.Length != 6 || strcmp(buf, "hello") != 0) return 2;
    } else {
        VIP_RETURN rc;
        char me[64];
        VIP_NET_ADDRESS *self = (VIP_NET_ADDRESS *)me;
        check(VipNSGetHostByName(nic, "localhost", self, 0), "VipNSGetHostByName");
        self->DiscriminatorLen = 1;
        self->HostAddress[self->HostAddressLen] = 'c';
        while ((rc = VipConnectRequest(vi, self, local, 10000, &remote)) == VIP_NO_MATCH) usleep(1000);
        check(rc, "VipConnectRequest");
        strcpy(buf, "hello");
        desc->CS.Length = 6;
        desc->DS[0].Local.Length = 6;
        check(VipPostSend(vi, desc, mh), "VipPostSend");
        check(VipSendWait(vi, VIP_INFINITE, &done), "VipSendWait");
        if (!(done->CS.Status & VIP_STATUS_DONE)) return 3;
    }
    VipDisconnect(vi);
    while (VipSendDone(vi, &done) == VIP_SUCCESS || VipRecvDone(vi, &done) == VIP_DESCRIPTOR_ERROR) {
    }
    check(VipDestroyVi(vi), "VipDestroyVi");
    check(VipDeregisterMem(nic, mem, mh), "VipDeregisterMem");
    check(VipDestroyPtag(nic, ptag), "VipDestroyPtag");
    check(VipCloseNic(nic), "VipCloseNic");
    return 0;
}

int main(void) {
    char disc[32];
    int status;
    pid_t pid;
    snprintf(disc, sizeof disc, "intel%d", (int)getpid());
    pid = fork();
    if (pid == 0) _exit(run(1, disc));
    if (run(0, disc) != 0) return 1;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    puts("intel-style program: ok");
    return 0;
}
