// A strict JSON scanner for the slow paths of the change decoder (change_json.h): it says
// where simdjson refused a body, finds the numbers simdjson cannot hold, and gives a number
// as the body wrote it for a message. simdjson says what is wrong but not where, and keeps
// no spelling of a number; this plain byte loop runs only when one of those is needed.
//
// The grammar is RFC 8259's, over a text of JSON values separated by white space (one
// value, or JSON lines), with simdjson's limit of 1024 levels of nesting. Numbers of any
// size are JSON; whether simdjson can hold one is reported, not refused.
//
// A value's *path* counts from 0: the top-level value, then at each level the element of
// an array or the field (key: value pair) of an object. In
//   {"a": 1, "b": [true, 2]}  {"c": 3}
// 1 is at {0, 0}, 2 at {0, 1, 1} and 3 at {1, 0}.
//
// Thread-safety: plain functions over the text they are given.
#pragma once

#include <absl/functional/function_ref.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tally::derived {

// One number met by ScanJson.
struct JsonNumber {
  std::span<const uint32_t> path;  // valid during the callback
  size_t offset = 0;               // of its first byte
  std::string_view text;           // as written
  // Whether simdjson holds it: an integer in [-2^63, 2^64), or a number with a fraction or
  // an exponent that is finite as a double (one that underflows to 0 is held).
  bool held = true;
};

// Scans `text`, calling `on_number` for each number in order. Returns the offset of the
// first byte where `text` stops being JSON values separated by white space, or nullopt
// when it is all JSON (white space alone included).
std::optional<size_t> ScanJson(std::string_view text,
                               absl::FunctionRef<void(const JsonNumber&)> on_number);

// The offset where simdjson's refusal of `text` lies: the first byte that is not UTF-8
// for simdjson::UTF8_ERROR, else the first byte where `text` stops being JSON. nullopt
// when neither is found.
std::optional<size_t> LocateJsonError(std::string_view text, bool utf8_error);

// Overwrites each number of text[0, size) that simdjson does not hold with "0.0" and
// spaces to its length, so that simdjson parses the text and every byte offset stays the
// same. Returns how many were overwritten: those before the first byte where the text
// stops being JSON, if it does.
size_t MaskUnheldNumbers(char* text, size_t size);

// The number at `path` in `text` as written, or nullopt when there is none (or `text` is
// not JSON before it).
std::optional<std::string_view> NumberAt(std::string_view text, std::span<const uint32_t> path);

}  // namespace tally::derived
