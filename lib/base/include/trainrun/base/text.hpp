#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun {

// Text another node sent (host names, failure summaries, reasons), made safe for a terminal:
// C0 control characters, DEL and the C1 controls (U+0080..U+009F) are written as escapes
// ("\x1b", "\u009b"), so no peer can move the cursor, recolour or retitle another node's
// terminal. Tabs stay; newlines stay only when `keep_newlines` (multi-line summaries).
std::string escape_control(std::string_view text, bool keep_newlines = false);

// The longest prefix of `text` of at most `max_bytes` bytes that does not split a UTF-8
// sequence.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

// The longest suffix of `text` of at most `max_bytes` bytes that starts on a character.
std::string_view utf8_suffix(std::string_view text, std::size_t max_bytes);

// The longest prefix of `text` that is valid UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF), as JSON text must be: all of `text` when it is valid.
std::string_view valid_utf8_prefix(std::string_view text);

// `text` with every byte but ASCII letters, digits, '.', '_' and '-' written as %XX (upper-case
// hex): a name with no '/' that still reads as the original, and different for different texts.
// For a run id as a directory name or as one segment of an etcd key.
std::string percent_encode(std::string_view text);

// `text` without the spaces and tabs it starts and ends with.
std::string trim(std::string_view text);

// The pieces of `text` between each `separator`: "a,,b" is {"a", "", "b"}, "" is {""}.
std::vector<std::string> split(std::string_view text, char separator);

bool ends_with(std::string_view text, std::string_view suffix);

// Levenshtein distance: the fewest single-byte insertions, deletions and substitutions that turn
// `a` into `b` (for "did you mean ...?").
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate `word` is most likely a typo of (at most a third of it changed), for "did you
// mean ...?"; empty when none is that near.
std::string closest_word(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace trainrun
