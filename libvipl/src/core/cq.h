// Completion queues: a bounded FIFO of (VI, queue) entries shared by many VIs.
#pragma once

#include "core/objects.h"

#include <vector>

namespace vipl {

VIP_RETURN cq_create(Nic *nic, uint32_t entries, bool shareable, Cq **out);
void cq_destroy(Cq *cq);

// Adds an entry (vi->lock held).  False when the CQ is full: the caller keeps
// the completion and the CQ remembers to call it back when room appears.
bool cq_push(Cq *cq, Vi *vi, bool recv);
// The member VIs, copied under the CQ's lock (to be used without it).
void cq_members(Cq *cq, std::vector<Vi *> &out);
// Takes the oldest entry; false when empty.
bool cq_pop(Cq *cq, CqEntry *out);
// Makes room visible to VIs whose completions wait (no lock held).
void cq_drain_backlog(Cq *cq);
// Wakes CQ waiters (and the wait fd) if there are any.
void cq_wake(Cq *cq);
void cq_drain(Cq *cq);

void cq_attach(Cq *cq, Vi *vi);
void cq_detach(Cq *cq, Vi *vi);
// Adds or removes the VI's transport descriptors in the CQ's poll set.
void cq_watch_fds(Cq *cq, Vi *vi, bool add);

} // namespace vipl
