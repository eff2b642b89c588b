#include "pg_environment.h"

#include <cctype>
#include <string_view>

namespace vipl::db::tools {

namespace {

constexpr std::string_view kKey = "LD_PRELOAD";
constexpr std::string_view kMarker = "# vipl-pg enable";
constexpr std::string_view kReplaced = "# vipl-pg enable; disable restores: ";
constexpr std::string_view kAdded = "# vipl-pg enable added the next line; disable removes both";
constexpr std::string_view kAddedBreak = "# vipl-pg enable added the next line and the line "
                                         "break above; disable removes them";

// The file as lines without their line breaks, and whether the last one had one.
struct Lines {
    std::vector<std::string> v;
    bool final_break = true;
};

Lines split(const std::string &t) {
    Lines l;
    size_t p = 0;
    while (p < t.size()) {
        size_t q = t.find('\n', p);
        if (q == std::string::npos) {
            l.v.push_back(t.substr(p));
            l.final_break = false;
            break;
        }
        l.v.push_back(t.substr(p, q - p));
        p = q + 1;
    }
    return l;
}

std::string join(const Lines &l) {
    std::string t;
    for (size_t i = 0; i < l.v.size(); ++i) {
        t += l.v[i];
        if (i + 1 < l.v.size() || l.final_break) t += '\n';
    }
    return t;
}

// Perl's \s, which pg_ctlcluster's reader (PgCommon::read_conf_file) uses.
bool blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool key_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

enum class Parse { other, ok, bad };

bool same_key(std::string_view a, std::string_view b, bool ignore_case) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i] && (!ignore_case || std::tolower(static_cast<unsigned char>(a[i])) !=
                                                 std::tolower(static_cast<unsigned char>(b[i]))))
            return false;
    return true;
}

// Reads a line the way read_conf_file does: `KEY = 'quoted'` (with '' and \x escapes) or
// `KEY = simple`, either followed by an optional comment.  ok with *value when it assigns
// key, bad when it names key in a form that reader refuses.
Parse parse_line(std::string_view s, std::string *value, std::string_view key = kKey,
                 bool ignore_case = false) {
    size_t i = 0, n = s.size();
    while (i < n && blank(s[i])) ++i;
    size_t k = i;
    while (i < n && key_char(s[i])) ++i;
    if (!same_key(s.substr(k, i - k), key, ignore_case)) return Parse::other;
    size_t gap = i;
    while (i < n && blank(s[i])) ++i;
    if (i < n && s[i] == '=') {
        ++i;
        while (i < n && blank(s[i])) ++i;
    } else if (i == gap) {
        return Parse::bad;
    }
    std::string raw;
    if (i < n && s[i] == '\'') {
        for (++i;; ++i) {
            if (i >= n) return Parse::bad;
            if (s[i] != '\'') {
                raw += s[i];
            } else if (i + 1 < n && s[i + 1] == '\'') {
                raw += "''";
                ++i;
            } else if (!raw.empty() && raw.back() == '\\') {
                raw += '\'';
            } else {
                ++i;
                break;
            }
        }
        // The reader's two substitutions, in its order: \x -> x, then '' -> '.
        std::string a;
        for (size_t j = 0; j < raw.size(); ++j) {
            if (raw[j] == '\\' && j + 1 < raw.size()) ++j;
            a += raw[j];
        }
        raw.clear();
        for (size_t j = 0; j < a.size(); ++j) {
            raw += a[j];
            if (a[j] == '\'' && j + 1 < a.size() && a[j + 1] == '\'') ++j;
        }
    } else {
        size_t v = i;
        if (i < n && s[i] == '-') ++i;
        if (i >= n || !std::isalnum(static_cast<unsigned char>(s[i]))) return Parse::bad;
        auto simple = [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                   c == ':' || c == '/' || c == '+' || c == '-';
        };
        while (i < n && simple(s[i])) ++i;
        raw = std::string(s.substr(v, i - v));
    }
    while (i < n && blank(s[i])) ++i;
    if (i < n && s[i] != '#') return Parse::bad;
    *value = raw;
    return Parse::ok;
}

std::string assignment(const std::string &value) {
    std::string q;
    for (char c : value) {
        if (c == '\\' || c == '\'') q += c;
        q += c;
    }
    return std::string(kKey) + " = '" + q + "'";
}

// The index of the last line assigning LD_PRELOAD (-1: none); false, with *why, when a
// line names it in a form pg_ctlcluster would refuse.
bool last_assignment(const Lines &l, long *index, std::string *value, std::string *why) {
    *index = -1;
    for (size_t i = 0; i < l.v.size(); ++i) {
        std::string v;
        Parse p = parse_line(l.v[i], &v);
        if (p == Parse::bad) {
            *why = "line " + std::to_string(i + 1) +
                   " sets LD_PRELOAD in a form pg_ctlcluster does not read: " + l.v[i];
            return false;
        }
        if (p == Parse::ok) {
            *index = static_cast<long>(i);
            *value = v;
        }
    }
    return true;
}

long find_marker(const Lines &l) {
    for (size_t i = l.v.size(); i-- > 0;)
        if (std::string_view(l.v[i]).starts_with(kMarker)) return static_cast<long>(i);
    return -1;
}

} // namespace

bool preload_names_interposer(const std::string &preload, std::string *entry) {
    size_t p = 0;
    while (p < preload.size()) {
        size_t q = preload.find_first_of(": \t", p);
        if (q == std::string::npos) q = preload.size();
        std::string_view e(preload.data() + p, q - p);
        size_t slash = e.rfind('/');
        if (e.substr(slash == std::string_view::npos ? 0 : slash + 1) == "libvipl-db.so") {
            *entry = std::string(e);
            return true;
        }
        p = q + 1;
    }
    return false;
}

bool conf_value(const std::string &text, std::string_view key, bool ignore_case,
                std::string *value) {
    bool found = false;
    for (const std::string &line : split(text).v) {
        std::string v;
        if (parse_line(line, &v, key, ignore_case) == Parse::ok) {
            *value = v;
            found = true;
        }
    }
    return found;
}

bool env_ld_preload(const std::string &text, std::string *value) {
    Lines l = split(text);
    long at;
    std::string why;
    return last_assignment(l, &at, value, &why) && at >= 0;
}

bool env_enable(const std::string &text, const std::string &library, EnvEdit *out,
                std::string *why) {
    *out = EnvEdit{};
    out->text = text;
    Lines l = split(text);
    long at;
    std::string value, entry;
    if (!last_assignment(l, &at, &value, why)) return false;

    if (long m = find_marker(l); m >= 0) {
        // Enabled before: vipl-pg's line is the one under its marker.
        std::string v;
        if (static_cast<size_t>(m) + 1 >= l.v.size() || parse_line(l.v[m + 1], &v) != Parse::ok ||
            !preload_names_interposer(v, &entry)) {
            *why = "line " + std::to_string(m + 2) +
                   " under vipl-pg's marker is not its LD_PRELOAD line; run `vipl-pg disable` "
                   "or edit the file";
            return false;
        }
        if (at != m + 1) {
            *why = "line " + std::to_string(at + 1) +
                   " sets LD_PRELOAD again, after vipl-pg's line; edit the file";
            return false;
        }
        if (entry == library) {
            out->note = "already enabled: LD_PRELOAD names " + library + "; nothing changed";
            return true;
        }
        v.replace(v.find(entry), entry.size(), library);
        out->removed.push_back(l.v[m + 1]);
        l.v[m + 1] = assignment(v);
        out->added.push_back(l.v[m + 1]);
        out->note = "enabled: LD_PRELOAD names " + library + " instead of " + entry;
    } else if (at >= 0 && preload_names_interposer(value, &entry)) {
        out->note =
            "LD_PRELOAD already names " + entry + " (set by hand, not by vipl-pg); nothing changed";
        return true;
    } else if (at >= 0) {
        std::string original = l.v[at];
        l.v[at] = std::string(kReplaced) + original;
        l.v.insert(l.v.begin() + at + 1, assignment(library + (value.empty() ? "" : ":" + value)));
        out->removed.push_back(original);
        out->added = {l.v[at], l.v[at + 1]};
        out->note = "enabled: LD_PRELOAD names " + library + " first, then what it had";
    } else {
        bool add_break = !l.final_break && !l.v.empty();
        l.v.push_back(std::string(add_break ? kAddedBreak : kAdded));
        l.v.push_back(assignment(library));
        l.final_break = true;
        out->added = {l.v[l.v.size() - 2], l.v.back()};
        out->note = "enabled: LD_PRELOAD names " + library;
    }
    out->text = join(l);
    out->changed = out->text != text;
    return true;
}

bool env_disable(const std::string &text, EnvEdit *out, std::string *why) {
    *out = EnvEdit{};
    out->text = text;
    Lines l = split(text);
    bool any = false;
    for (long m = find_marker(l); m >= 0; m = find_marker(l)) {
        std::string marker = l.v[m], v;
        bool ours =
            static_cast<size_t>(m) + 1 < l.v.size() && parse_line(l.v[m + 1], &v) == Parse::ok;
        bool last = static_cast<size_t>(m) + (ours ? 1 : 0) + 1 == l.v.size();
        out->removed.push_back(marker);
        if (ours) out->removed.push_back(l.v[m + 1]);
        if (ours) l.v.erase(l.v.begin() + m + 1);
        if (std::string_view(marker).starts_with(kReplaced)) {
            l.v[m] = marker.substr(kReplaced.size());
            out->added.push_back(l.v[m]);
        } else if (marker == kAdded || marker == kAddedBreak) {
            l.v.erase(l.v.begin() + m);
            // The line break enable added ends the line above, if nothing came after.
            if (marker == kAddedBreak && last) l.final_break = false;
        } else {
            *why = "line " + std::to_string(m + 1) +
                   " is a vipl-pg marker this version does not know: " + marker;
            return false;
        }
        any = true;
    }
    if (!any) {
        std::string value, entry;
        out->note = "not enabled by vipl-pg; nothing changed";
        if (env_ld_preload(text, &value) && preload_names_interposer(value, &entry))
            out->note += " (LD_PRELOAD names " + entry + ", set by hand: remove it by hand)";
        return true;
    }
    out->text = join(l);
    out->changed = out->text != text;
    out->note = "disabled: what vipl-pg enable changed is back as it was";
    return true;
}

} // namespace vipl::db::tools
