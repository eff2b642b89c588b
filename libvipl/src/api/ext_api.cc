// Extensions: wait descriptors, counters, return-code names, introspection.
#include "api/entry.h"
#include "core/clock.h"
#include "core/config.h"
#include "core/cq.h"
#include "core/fds.h"
#include "core/lifecycle.h"
#include "core/log.h"
#include "core/vi.h"
#include "core/vi_guard.h"
#include "core/wait.h"
#include "prov/provider.h"

#include <cerrno>
#include <cstring>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

namespace vipl {
extern "C" {

const char *VipReturnString(VIP_RETURN Code) {
    static const char *const names[] = {"VIP_SUCCESS",
                                        "VIP_NOT_DONE",
                                        "VIP_INVALID_PARAMETER",
                                        "VIP_ERROR_RESOURCE",
                                        "VIP_TIMEOUT",
                                        "VIP_REJECT",
                                        "VIP_INVALID_RELIABILITY_LEVEL",
                                        "VIP_INVALID_MTU",
                                        "VIP_INVALID_QOS",
                                        "VIP_INVALID_PTAG",
                                        "VIP_INVALID_RDMAREAD",
                                        "VIP_DESCRIPTOR_ERROR",
                                        "VIP_INVALID_STATE",
                                        "VIP_ERROR_NAMESERVICE",
                                        "VIP_NO_MATCH",
                                        "VIP_NOT_REACHABLE",
                                        "VIP_ERROR_NOT_SUPPORTED",
                                        "VIP_INTERRUPTED",
                                        "VIP_ERROR_REENTERED"};
    unsigned c = static_cast<unsigned>(Code);
    return c < sizeof names / sizeof names[0] ? names[c] : "VIP_UNKNOWN";
}

VIP_RETURN VipGetViWaitFd(VIP_VI_HANDLE ViHandle, int *Fd) {
    return VipGetViWaitFdEx(ViHandle, 0, Fd);
}

VIP_RETURN VipGetViWaitFdEx(VIP_VI_HANDLE ViHandle, VIP_ULONG Flags, int *Fd) {
    return locked_vi_call(ViHandle, Fd && !(Flags & ~VIP_WAITFD_EXPLICIT_ARM), [&](Vi *vi) {
        if (vis().local(vi).user_fd < 0) {
            // A shareable VI's fd stays valid in fork children (they hold the VI too).
            int ep = fd_track(epoll_create1(EPOLL_CLOEXEC), vi->shareable);
            if (ep < 0) {
                VIPL_LOG(error, "VipGetViWaitFd: epoll_create1: %s", strerror(errno));
                return VIP_ERROR_RESOURCE;
            }
            epoll_event ev{};
            ev.events = EPOLLIN;
            epoll_ctl(ep, EPOLL_CTL_ADD, vi->efd, &ev);
            watch_transport(ep, vi, 0, true);
            vis().local(vi).user_fd = ep;
        }
        bool explicit_arm = Flags & VIP_WAITFD_EXPLICIT_ARM;
        vi->fd_explicit.store(explicit_arm);
        vi->fd_mode.store(true);
        *Fd = vis().local(vi).user_fd;
        if (explicit_arm) return VIP_SUCCESS; // the program arms before it sleeps
        // Make the fd truthful from now on: readable if something is already there.
        vi_arm(vi);
        vi_progress(vi);
        if (vi->sq.head != vi->sq.visible || vi->rq.head != vi->rq.visible ||
            (vi->prov && vi->nic->ops->vi->pending(vi))) {
            vi->kicked.store(false);
            vi_wake(vi);
        }
        *Fd = vis().local(vi).user_fd;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipArmViWaitFdEx(VIP_VI_HANDLE ViHandle, VIP_ULONG Events) {
    const bool ok = (Events & VIP_ARM_ANY) && !(Events & ~(VIP_ARM_ANY | VIP_ARM_EDGE));
    return locked_vi_call(ViHandle, ok, [&](Vi *vi) {
        if (!vi->fd_mode.load()) return VIP_INVALID_STATE;
        static_assert(VIP_ARM_ARRIVALS == kWakeRecv && VIP_ARM_CONSUMED == kWakeSend);
        arm_wait_fd(vi, static_cast<unsigned>(Events & VIP_ARM_ANY), (Events & VIP_ARM_EDGE) != 0);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipArmViWaitFd(VIP_VI_HANDLE ViHandle) {
    return VipArmViWaitFdEx(ViHandle, VIP_ARM_ANY);
}

VIP_RETURN VipWaitViEvent(VIP_VI_HANDLE ViHandle, VIP_ULONG Events, VIP_ULONG Timeout) {
    return api_call([&] {
        Vi *vi = find_vi(ViHandle);
        if (!vi || !Events || (Events & ~VIP_ARM_ANY)) return VIP_INVALID_PARAMETER;
        return vi_wait_event(vi, ViHandle, static_cast<unsigned>(Events),
                             deadline_after_ms(Timeout));
    });
}

VIP_RETURN VipGetCQWaitFd(VIP_CQ_HANDLE CQHandle, int *Fd) {
    return api_call([&] {
        Cq *cq = find_cq(CQHandle);
        if (!cq || !Fd) return VIP_INVALID_PARAMETER;
        InUse in_use(cq->users);
        if (!cqs().still(cq, CQHandle)) return VIP_INVALID_PARAMETER;
        cq->fd_mode.store(true);
        cq_rearm_for_fd(cq);
        *Fd = cq->epfd;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipQueryViEndpoints(VIP_VI_HANDLE ViHandle, VIP_VI_ENDPOINTS *Endpoints) {
    return locked_vi_call(ViHandle, Endpoints != nullptr, [&](Vi *vi) {
        if (!vi->prov) return VIP_INVALID_STATE;
        return vi->nic->ops->vi->endpoints(vi, Endpoints);
    });
}

VIP_RETURN VipQueryViCounters(VIP_VI_HANDLE ViHandle, VIP_VI_COUNTERS *Counters) {
    return locked_vi_call(ViHandle, Counters != nullptr, [&](Vi *vi) {
        *Counters = vi->counters;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipQueryViHolders(VIP_VI_HANDLE ViHandle, VIP_ULONG *Holders) {
    return locked_vi_call(ViHandle, Holders != nullptr, [&](Vi *vi) {
        int others = vi->shareable ? vi->holders->live_others(self_token()) : 0;
        *Holders = static_cast<VIP_ULONG>(1 + others);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipViSpinBudget(VIP_VI_HANDLE ViHandle, VIP_UINT64 BaseNanoseconds,
                           VIP_SPIN_BUDGET *Budget) {
    return locked_vi_call(ViHandle, Budget != nullptr, [&](Vi *vi) {
        SpinPlan plan = spin_plan(vi, BaseNanoseconds);
        Budget->Nanoseconds = plan.ns;
        Budget->YieldEvery = plan.yield_every;
        Budget->PeerCpuKnown = plan.peer_cpu_known ? VIP_TRUE : VIP_FALSE;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipViSpinOutcome(VIP_VI_HANDLE ViHandle, VIP_BOOLEAN Won) {
    return locked_vi_call(ViHandle, true, [&](Vi *vi) {
        spin_outcome(vi, Won != VIP_FALSE);
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipQueryViPeerCpu(VIP_VI_HANDLE ViHandle, int *PeerCpu) {
    return locked_vi_call(ViHandle, PeerCpu != nullptr, [&](Vi *vi) {
        *PeerCpu = vi->prov ? vi->nic->ops->vi->exchange_cpu(vi, sched_getcpu()) : -1;
        return VIP_SUCCESS;
    });
}

VIP_ULONG VipProviderCount(void) {
    return provider_count();
}

VIP_RETURN VipProviderInfo(VIP_ULONG Index, VIP_PROVIDER_INFO *Info) {
    return api_call([&] {
        if (!Info || Index >= provider_count()) return VIP_INVALID_PARAMETER;
        const ProviderOps *p = provider_at(Index);
        Info->Name = p->name;
        Info->Devices = p->devices();
        Info->Summary = p->summary;
        return VIP_SUCCESS;
    });
}

VIP_ULONG VipConfigCount(void) {
    size_t n = core_config_table().count();
    for (size_t i = 0; i < provider_count(); ++i) n += provider_at(i)->config().count();
    return static_cast<VIP_ULONG>(n);
}

VIP_RETURN VipConfigInfo(VIP_ULONG Index, VIP_CONFIG_INFO *Info) {
    // The configuration is loaded once under std::call_once: a handler that
    // interrupted that load and read it again would deadlock.
    return api_call([&] {
        if (!Info) return VIP_INVALID_PARAMETER;
        // The core's keys, then each provider's in registry order.
        ConfigTable *t = &core_config_table();
        size_t i = Index;
        for (size_t p = 0; i >= t->count(); ++p) {
            if (p == provider_count()) return VIP_INVALID_PARAMETER;
            i -= t->count();
            t = &provider_at(p)->config();
        }
        const ConfigKey &k = t->key(i);
        Info->Name = k.name;
        Info->DefaultValue = k.default_value;
        Info->Value = t->value_text(i);
        Info->Help = k.help;
        return VIP_SUCCESS;
    });
}

VIP_RETURN VipLogHandler(VIP_LOG_HANDLER Handler, VIP_PVOID Context) {
    // No api_call: a program may set it from anywhere, even inside a callback.
    log_watch(Handler, Context);
    return VIP_SUCCESS;
}

} // extern "C"
} // namespace vipl
