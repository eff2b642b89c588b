// The shared arena: memory shared with every child a process forks after the
// arena exists.  One large MAP_SHARED|MAP_ANONYMOUS|MAP_NORESERVE reservation
// made on first use, so allocations made later by any process of the tree
// are visible to all of them at the same address.  Shareable objects (VIs,
// CQs) and everything they own live here.
#pragma once

#include "core/token.h"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vipl {

// nullptr when the arena cannot be created or is full.
void *shared_alloc(size_t bytes);
void shared_free(void *p, size_t bytes);
// For objects that must be type-stable: a block freed for a kind is only ever
// handed out again for the same kind (and size).
void *shared_alloc_kind(size_t bytes, int kind);
void shared_free_kind(void *p, int kind);
constexpr int kArenaKinds = 8;
bool is_shared(const void *p);

// Zeroed allocation from the arena or the heap.
void *object_alloc(size_t bytes, bool shared);
void object_free(void *p, size_t bytes, bool shared);

} // namespace vipl
