// libFuzzer target for the timestamp reader (core/timestamp.h), which reads client input:
// cells of pushed changes, key parts and instants of reads. The input is one text. Checked
// along the way: whatever ParseTimestamp reads, its key spelling (FormatTimestamp) reads
// back as the same instant; a refusal is kInvalidArgument with a reason; ParseInstant
// agrees with ParseTimestamp on every text that is not digits alone.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/timestamp.h"
#include "fuzz_check.h"

using tally::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const tally::Result<int64_t> micros = tally::ParseTimestamp(text);
  if (micros) {
    const tally::Result<int64_t> again = tally::ParseTimestamp(tally::FormatTimestamp(*micros));
    Check(again && *again == *micros, "the key spelling reads back", text);
  } else {
    Check(micros.error().code == tally::ErrorCode::kInvalidArgument,
          "a refusal is kInvalidArgument");
    Check(!micros.error().message.empty(), "a refusal says why");
  }
  if (text.find_first_not_of("-0123456789") != std::string_view::npos) {
    const tally::Result<int64_t> instant = tally::ParseInstant(text);
    Check(instant.has_value() == micros.has_value(), "an instant is read as a timestamp", text);
    Check(!instant || *instant == *micros, "an instant is the timestamp's", text);
  }
  return 0;
}
