// Stream options from the environment: one declared table of keys, each read from the
// environment variable VIPL_<name> (VIPL_STREAM_SPIN_US...), listed by
// `vipl-stream-config` and by stream_config_table().
//
// The Stream itself reads no environment: a program (or plug-in) takes
// stream_options_from_env() as its StreamOptions, then overrides what it must.
//
// Errors: a bad value is std::errc::invalid_argument with a sentence naming the
// variable, the value and what is accepted; nothing throws, nothing aborts.
// Threads: every function is thread-safe (stream_options_from_env() reads the
// environment: do not setenv() meanwhile).  Signals: none is async-signal-safe.
#pragma once

#include "vipl/stream.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace vipl {

struct StreamConfigKey {
    const char *name;          // "STREAM_SPIN_US": environment variable VIPL_STREAM_SPIN_US
    const char *type;          // "u32" (decimal, or hexadecimal with 0x) or "string"
    const char *default_value; // the value in StreamOptions{}, as text
    uint64_t min, max;         // accepted range of a u32 (0, 0 for a string)
    const char *help;
};

// Every key, in a fixed order.  The strings live as long as the program.
std::span<const StreamConfigKey> stream_config_table() noexcept;

// Sets the option `key` ("STREAM_SPIN_US" or "VIPL_STREAM_SPIN_US") of `o` from text.
// Errors (o unchanged): invalid_argument for an unknown key, a value that is not a
// number, or one out of range; *why (when given) says which.
std::error_code set_stream_option(StreamOptions &o, std::string_view key, std::string_view value,
                                  std::string *why = nullptr);

// The value of option `key` in `o`, as text ("" for an unknown key).
std::string stream_option_value(const StreamOptions &o, std::string_view key);

// StreamOptions{} with every VIPL_STREAM_* variable of the environment applied (empty
// ones are ignored).  Bad values keep their default and make ec invalid_argument, as does
// a VIPL_STREAM_* variable that names no key (a typo would otherwise go unnoticed); *why
// lists every problem, "; "-separated.  The other variables are applied all the same.
StreamOptions stream_options_from_env(std::error_code &ec, std::string *why = nullptr);

} // namespace vipl
