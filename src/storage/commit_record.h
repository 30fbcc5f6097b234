// The byte form of one commit in the CommitLog:
//
//   payload    := epoch:u64-le flags:u8 delete-count:varint delete* put-count:varint put*
//   flags      := bit 0 set = clear every counter first (FLUSHALL)
//   delete     := key-length:varint key-bytes
//   put        := key-length:varint key-bytes value:i64-le deadline-ms:i64-le (0 = none)
//
// Operations apply in that order: clear, deletes, puts.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/persistence.h"

namespace tally::storage {

void EncodeCommit(const engine::CommitBatch& batch, std::string* out);

// Decodes a payload, calling the visitor for each operation in order (as from the log).
Status DecodeCommit(std::string_view payload, engine::LoadVisitor& visitor);

}  // namespace tally::storage
