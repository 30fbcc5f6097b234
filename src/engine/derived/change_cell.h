// The conversion of one value of a pushed row to its column's type, and the words of a
// refusal. Called by ChangeDecoder (change_json.h) for each column present in a row; the
// rules are change_json.h's "Cell types":
//   int64     <- a JSON integer in the int64 range (1.0 and 1e3 are refused)
//   bool      <- true or false
//   text      <- a string
//   timestamp <- a string as ParseTimestamp reads it (core/timestamp.h)
//   numeric   <- a string or a number, exactly at the column's scale (change_json.h)
//   float     <- a number
//   any type  <- null
//
// Thread-safety: plain functions; the arena is the caller's.
#pragma once

#include <absl/functional/function_ref.h>
#include <simdjson.h>

#include <optional>
#include <string>
#include <string_view>

#include "engine/definitions/program.h"
#include "engine/definitions/value.h"
#include "engine/derived/text_arena.h"

namespace tally::derived {

// Why a cell was refused, worded to follow the cell's name in a message:
//   "new"."rating" <must> (counter author_rating reads it), got <got>
struct CellRefusal {
  std::string must;  // "must be an int64", "is out of the int64 range"
  std::string got;   // "a string", "99999999999999999999", "1e3 (a number with a fraction ...)"
};

// Converts `value` to a cell of `column`'s type into *cell; JSON null leaves *cell as it is
// (NULL). Text is copied into `arena`. `masked` says the body's numbers that simdjson
// cannot hold were masked to 0.0 (json_scan.h). `spelling` gives the value as the body
// wrote it (simdjson keeps no spelling), for the words of a refused number and for a
// numeric cell that a double does not give exactly (or a masked one); it is called only
// then, and may give nullopt (the number is then written as simdjson read it).
std::optional<CellRefusal> ConvertCell(
    simdjson::dom::element value, const definitions::SourceSchema::Column& column, TextArena& arena,
    bool masked, absl::FunctionRef<std::optional<std::string_view>()> spelling,
    definitions::Value* cell);

// What a JSON value is, for "got ..." in messages: "an array", "an object", "a number",
// "a string", "a boolean" or "null".
std::string_view JsonKind(simdjson::dom::element_type type);

}  // namespace tally::derived
