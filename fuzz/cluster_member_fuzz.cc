// libFuzzer target for the decoder of a cluster node's heartbeat (cluster/member_codec.h),
// which reads whatever the members subject carries. Checked along the way: a refusal is
// kCorruption with a reason; a decoded heartbeat encodes to exactly the bytes it came from
// (the grammar has one spelling), and those decode to the same heartbeat.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cluster/member_codec.h"
#include "fuzz_check.h"

namespace {

using tally::cluster::DecodeMember;
using tally::cluster::EncodeMember;
using tally::cluster::MemberInfo;
using tally::fuzz::Check;

bool Same(const MemberInfo& a, const MemberInfo& b) {
  return a.node_id == b.node_id && a.node_name == b.node_name &&
         a.redis_address == b.redis_address && a.http_address == b.http_address &&
         a.owned == b.owned && a.releasing == b.releasing && a.leaving == b.leaving &&
         a.draining == b.draining && a.checkpointed == b.checkpointed &&
         a.change_floor == b.change_floor && a.sequence == b.sequence;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto decoded = DecodeMember(bytes);
  if (!decoded) {
    Check(decoded.error().code == tally::ErrorCode::kCorruption, "a refusal is kCorruption");
    Check(!decoded.error().message.empty(), "a refusal says why");
    return 0;
  }
  const std::string encoded = EncodeMember(*decoded);
  Check(encoded == bytes, "a heartbeat encodes to the bytes it came from", encoded);
  auto again = DecodeMember(encoded);
  Check(again.has_value() && Same(*again, *decoded), "its encoding decodes the same");
  return 0;
}
