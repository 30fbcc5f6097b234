// Decoding of pushed changes: JSON text → rows in a source's schema order, with the
// precise error a client needs when a change does not fit.
//
// A change is one JSON object:
//   {"source": "posts", "id": "c-17", "old": {...row...}, "new": {...row...}}
// "old" is absent (or null) for an insert, "new" for a delete; "id" is optional, and when
// present a non-empty string. Any other key of a change is refused (a typo such as "Id"
// must not silently drop the idempotency id), as is a key given twice. A row is an object
// of column → value; columns the source does not have are ignored (their values must still
// be valid JSON), and a column no counter reads may be absent (it reads as NULL); a column
// given twice is refused. Every column present is checked against its type, read by a
// counter or not. A body holds one change, a JSON array of changes, or JSON lines (change
// objects separated by white space, usually one per line; blank lines are fine).
//
// Cell types: int64 ← a JSON integer in the int64 range (1.0 and 1e3 are refused);
// bool ← true/false; text ← a string; timestamp ← a string as ParseTimestamp reads it
// (core/timestamp.h: "2024-05-01", "2024-05-01T13:45:07.5+02:00", "20240501T134507Z"; no
// offset = UTC); numeric(p,s) ← a string "1234.50" or a JSON number, exactly, with at most s
// digits after the point (an integer as written; a number with a fraction as the double
// simdjson reads, taken exactly from its shortest spelling when that has at most 15
// significant digits, else from the body's own spelling: "0.10000000000000001" is read as
// 0.10, send a string to be sure); float ← a JSON number; any type ← null. Anything else is
// refused (change_cell.h converts). A number of any size is valid JSON: one past what
// simdjson holds (an integer past 64 bits, 1e400) is refused like any other for the column
// it is in (a numeric column reads it exactly when it fits), and ignored in a key that is
// not a column.
//
// The parts: change_json.cc frames the body and walks each change and row;
// change_cell.{h,cc} converts a cell; json_scan.{h,cc} locates invalid JSON and the
// numbers simdjson cannot hold; text_arena.h and message_text.h serve them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/definitions/program.h"
#include "engine/definitions/value.h"

namespace tally::derived {

// What the decoder must know of a source: its schema and, per column, the name of one
// counter that reads it (empty when none does: such a column may be absent).
struct SourceView {
  const definitions::SourceSchema* schema = nullptr;
  std::vector<std::string> read_by;  // one per schema column
};

// Finds a source by name; nullptr when there is none.
using SourceLookup = std::function<const SourceView*(std::string_view name)>;

// One decoded change. Text cells view bytes owned by the ChangeDecoder that made it.
struct DecodedChange {
  const SourceView* source = nullptr;
  std::string_view id;  // empty when the change has none
  std::optional<std::vector<definitions::Value>> old_row;
  std::optional<std::vector<definitions::Value>> new_row;
};

// Decodes request bodies into changes. Reusable: each Decode() replaces the previous
// result, and keeps its buffers to avoid allocating again. Not thread-safe.
class ChangeDecoder {
 public:
  ChangeDecoder();
  ~ChangeDecoder();
  ChangeDecoder(const ChangeDecoder&) = delete;
  ChangeDecoder& operator=(const ChangeDecoder&) = delete;

  // Decodes a body: one change object, a JSON array of them, or JSON lines. All or
  // nothing: on error no change is returned, the code is kInvalidArgument and the message
  // reads
  //   change N: <what>        (N counts from 1 in the body's order)
  // e.g. `change 3: "new"."rating" must be an int64 (counter author_rating reads it), got a string`
  //      `change 1: "new"."amount" is out of the int64 range, got 99999999999999999999`
  //      `change 1: "new"."amount" must be an int64, got 1e3 (a number with a fraction or an
  //      exponent)` `change 2: "new" has no column "rating", which counter author_rating reads`
  //      `change 1: unknown source "postz"`
  //      `invalid JSON: <simdjson's reason> near byte 17`   (bytes counted from 0)
  // Received strings and numbers in messages are cut after 40 bytes (message_text.h).
  // The result, its rows and their text cells are valid until the next Decode. An empty
  // array decodes to no change.
  // The decoder keeps its buffers sized for the largest body it has seen: simdjson reserves
  // about 14 bytes of address space per body byte (a fraction of it touched), the decoder
  // two more; bound the body size before calling.
  Result<std::span<const DecodedChange>> Decode(std::string_view body, const SourceLookup& lookup);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::derived
