// Fixed-capacity queues over storage the owner places (a stream keeps its state in the
// memory of its mapping, which a shareable stream shares with its fork children: no
// heap, no pointers but into that mapping, which every holder maps at one address).
#pragma once

#include <cstdint>

namespace vipl::detail {

// FIFO of at most `cap` items (the owner never pushes more: each item holds a distinct
// buffer of a fixed set).
template <class T>
struct Ring {
    T *items = nullptr;
    uint32_t cap = 0, head = 0, count = 0;

    void init(T *storage, uint32_t capacity) {
        items = storage;
        cap = capacity;
        head = count = 0;
    }
    bool empty() const { return count == 0; }
    bool full() const { return count >= cap; }
    uint32_t size() const { return count; }
    // The i-th item from the front (i < cap; no division on the hot path).
    uint32_t at(uint32_t i) const { return head + i >= cap ? head + i - cap : head + i; }
    T &operator[](uint32_t i) { return items[at(i)]; }
    const T &operator[](uint32_t i) const { return items[at(i)]; }
    T &front() { return items[head]; }
    const T &front() const { return items[head]; }
    T &back() { return (*this)[count - 1]; }
    const T &back() const { return (*this)[count - 1]; }
    void push_back(const T &v) { items[at(count++)] = v; }
    void pop_front() {
        head = head + 1 == cap ? 0 : head + 1;
        --count;
    }
    void pop_back() { --count; }
    void clear() { head = count = 0; }
};

// LIFO of at most `cap` items.
template <class T>
struct Stack {
    T *items = nullptr;
    uint32_t cap = 0, count = 0;

    void init(T *storage, uint32_t capacity) {
        items = storage;
        cap = capacity;
        count = 0;
    }
    bool empty() const { return count == 0; }
    uint32_t size() const { return count; }
    T back() const { return items[count - 1]; }
    void push_back(T v) { items[count++] = v; }
    void pop_back() { --count; }
};

} // namespace vipl::detail
