// The derived layer's catalog records (engine::Persistence::WriteCatalog, read at start by
// Catalog::Load): a few small named records, written durably before the step they record
// is acknowledged.
//
//   source/<name>    the normalised CREATE SOURCE statement
//   counter/<name>   the normalised CREATE COUNTER statement
//   dropping/<name>  "": a DROP COUNTER whose groups may not all be deleted yet; Load
//                    deletes what is left and removes the record
//   start/<name>     "pending" (the counter waits for its backfill) or the decimal source
//                    position it counts from; absent: it counts every change (start 0)
//   backfill/<name>  "": the counter's backfill from its start is not complete; Load
//                    deletes its groups and makes it pending again
//
// Catalog writes the first three and, for a counter created pending, "start/"; Backfill
// writes "start/" and "backfill/" as the counter's backfill goes.
#pragma once

#include <string>
#include <string_view>

namespace tally::derived {

inline constexpr std::string_view kSourceRecord = "source/";
inline constexpr std::string_view kCounterRecord = "counter/";
inline constexpr std::string_view kDroppingRecord = "dropping/";
inline constexpr std::string_view kStartRecord = "start/";
inline constexpr std::string_view kBackfillRecord = "backfill/";

// The value of "start/<name>" while the counter waits for its backfill.
inline constexpr std::string_view kPendingStartValue = "pending";

// The record of `name` of one kind: RecordName(kCounterRecord, "blog_posts") is
// "counter/blog_posts".
inline std::string RecordName(std::string_view kind, std::string_view name) {
  std::string record(kind);
  record.append(name);
  return record;
}

}  // namespace tally::derived
