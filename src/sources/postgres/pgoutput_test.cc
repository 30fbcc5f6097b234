#include "sources/postgres/pgoutput.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "sources/postgres/pg_types.h"

namespace tally::postgres {
namespace {

using ::testing::HasSubstr;

// A tiny big-endian encoder to build the messages of the protocol by hand.
class Enc {
 public:
  explicit Enc(char type) { U8(static_cast<uint8_t>(type)); }
  Enc& U8(uint8_t v) {
    bytes_.push_back(v);
    return *this;
  }
  Enc& U16(uint16_t v) { return Big(v, 2); }
  Enc& U32(uint32_t v) { return Big(v, 4); }
  Enc& U64(uint64_t v) { return Big(v, 8); }
  Enc& Str(std::string_view s) {
    Raw(s);
    return U8(0);
  }
  Enc& Raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  // A TupleData from cells spelled "n", "u" or "t:<text>".
  Enc& Tuple(std::initializer_list<std::string_view> cells) {
    U16(static_cast<uint16_t>(cells.size()));
    for (std::string_view c : cells) {
      if (c == "n" || c == "u") {
        U8(static_cast<uint8_t>(c[0]));
      } else {
        U8('t').U32(static_cast<uint32_t>(c.size() - 2)).Raw(c.substr(2));
      }
    }
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  Enc& Big(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

std::vector<uint8_t> BeginBytes() {
  return Enc('B').U64(0x16B374D848).U64(767'000'000'000'000).U32(7331).bytes();
}
std::vector<uint8_t> CommitBytes() {
  return Enc('C').U8(0).U64(0x100).U64(0x1A0).U64(767'000'000'000'001).bytes();
}
std::vector<uint8_t> OriginBytes() { return Enc('O').U64(0x42).Str("node_a").bytes(); }
std::vector<uint8_t> RelationBytes() {
  return Enc('R')
      .U32(16385)
      .Str("public")
      .Str("posts")
      .U8('f')
      .U16(3)
      .U8(1)
      .Str("id")
      .U32(20)
      .U32(0xFFFFFFFF)
      .U8(0)
      .Str("title")
      .U32(1043)
      .U32(104)
      .U8(0)
      .Str("body")
      .U32(25)
      .U32(0xFFFFFFFF)
      .bytes();
}
std::vector<uint8_t> TypeBytes() { return Enc('Y').U32(90001).Str("public").Str("mood").bytes(); }
std::vector<uint8_t> InsertBytes() {
  return Enc('I').U32(16385).U8('N').Tuple({"t:1", "t:hello", "n"}).bytes();
}
std::vector<uint8_t> UpdateNoOldBytes() {
  return Enc('U').U32(16385).U8('N').Tuple({"t:1", "t:new", "u"}).bytes();
}
std::vector<uint8_t> UpdateKeyBytes() {
  return Enc('U')
      .U32(16385)
      .U8('K')
      .Tuple({"t:1", "n", "n"})
      .U8('N')
      .Tuple({"t:2", "t:x", "u"})
      .bytes();
}
std::vector<uint8_t> UpdateFullBytes() {
  return Enc('U')
      .U32(16385)
      .U8('O')
      .Tuple({"t:1", "t:old", "t:long body"})
      .U8('N')
      .Tuple({"t:1", "t:new", "u"})
      .bytes();
}
std::vector<uint8_t> DeleteKeyBytes() {
  return Enc('D').U32(16385).U8('K').Tuple({"t:1", "n", "n"}).bytes();
}
std::vector<uint8_t> DeleteFullBytes() {
  return Enc('D').U32(16385).U8('O').Tuple({"t:1", "t:", "t:b"}).bytes();
}
std::vector<uint8_t> TruncateBytes() {
  return Enc('T')
      .U32(2)
      .U8(TruncateMessage::kCascade | TruncateMessage::kRestartIdentity)
      .U32(16385)
      .U32(16390)
      .bytes();
}
std::vector<uint8_t> LogicalMessageBytes() {
  return Enc('M').U8(1).U64(0x99).Str("tally").U32(3).Raw("abc").bytes();
}

std::vector<std::vector<uint8_t>> AllValidMessages() {
  return {BeginBytes(),         CommitBytes(),    OriginBytes(),      RelationBytes(),
          TypeBytes(),          InsertBytes(),    UpdateNoOldBytes(), UpdateKeyBytes(),
          UpdateFullBytes(),    DeleteKeyBytes(), DeleteFullBytes(),  TruncateBytes(),
          LogicalMessageBytes()};
}

std::string Text(const TupleCell& c) {
  EXPECT_EQ(c.kind, TupleCell::Kind::kText);
  return std::string(c.text);
}

template <typename T>
T DecodeAs(const std::vector<uint8_t>& bytes) {
  auto m = DecodeMessage(bytes);
  EXPECT_TRUE(m.has_value()) << (m ? "" : m.error().message);
  if (!m) return T{};
  EXPECT_TRUE(std::holds_alternative<T>(*m));
  return std::holds_alternative<T>(*m) ? std::get<T>(*m) : T{};
}

std::string DecodeError(const std::vector<uint8_t>& bytes) {
  auto m = DecodeMessage(bytes);
  EXPECT_FALSE(m.has_value());
  if (m) return "";
  EXPECT_EQ(m.error().code, ErrorCode::kCorruption);
  return m.error().message;
}

TEST(PgTimeTest, ConvertsEpochsAndSaturates) {
  EXPECT_EQ(PgMicrosToUnixMicros(0), 946'684'800'000'000);
  EXPECT_EQ(UnixMicrosToPgMicros(946'684'800'000'000), 0);
  EXPECT_EQ(PgMicrosToUnixMicros(INT64_MAX), INT64_MAX);
  EXPECT_EQ(UnixMicrosToPgMicros(INT64_MIN), INT64_MIN);
}

TEST(DecodeMessageTest, Begin) {
  auto m = DecodeAs<BeginMessage>(BeginBytes());
  EXPECT_EQ(m.final_lsn, 0x16B374D848u);
  EXPECT_EQ(m.commit_time, 767'000'000'000'000);
  EXPECT_EQ(m.xid, 7331u);
}

TEST(DecodeMessageTest, Commit) {
  auto m = DecodeAs<CommitMessage>(CommitBytes());
  EXPECT_EQ(m.flags, 0);
  EXPECT_EQ(m.commit_lsn, 0x100u);
  EXPECT_EQ(m.end_lsn, 0x1A0u);
  EXPECT_EQ(m.commit_time, 767'000'000'000'001);
}

TEST(DecodeMessageTest, Origin) {
  auto m = DecodeAs<OriginMessage>(OriginBytes());
  EXPECT_EQ(m.origin_commit_lsn, 0x42u);
  EXPECT_EQ(m.name, "node_a");
}

TEST(DecodeMessageTest, Relation) {
  auto m = DecodeAs<RelationMessage>(RelationBytes());
  EXPECT_EQ(m.oid, 16385u);
  EXPECT_EQ(m.namespace_name, "public");
  EXPECT_EQ(m.name, "posts");
  EXPECT_EQ(m.QualifiedName(), "public.posts");
  EXPECT_EQ(m.replica_identity, 'f');
  ASSERT_EQ(m.columns.size(), 3u);
  EXPECT_TRUE(m.columns[0].is_key);
  EXPECT_EQ(m.columns[0].name, "id");
  EXPECT_EQ(m.columns[0].type_oid, 20u);
  EXPECT_EQ(m.columns[0].type_modifier, -1);
  EXPECT_FALSE(m.columns[1].is_key);
  EXPECT_EQ(m.columns[1].name, "title");
  EXPECT_EQ(m.columns[1].type_oid, 1043u);
  EXPECT_EQ(m.columns[1].type_modifier, 104);
  EXPECT_EQ(m.columns[2].name, "body");
}

TEST(DecodeMessageTest, RelationInPgCatalogHasNoNamespace) {
  auto m = DecodeAs<RelationMessage>(Enc('R').U32(1).Str("").Str("t").U8('d').U16(0).bytes());
  EXPECT_EQ(m.QualifiedName(), "t");
  EXPECT_TRUE(m.columns.empty());
}

TEST(DecodeMessageTest, Type) {
  auto m = DecodeAs<TypeMessage>(TypeBytes());
  EXPECT_EQ(m.oid, 90001u);
  EXPECT_EQ(m.namespace_name, "public");
  EXPECT_EQ(m.name, "mood");
}

TEST(DecodeMessageTest, Insert) {
  const auto bytes = InsertBytes();
  auto m = DecodeAs<InsertMessage>(bytes);
  EXPECT_EQ(m.relation_oid, 16385u);
  ASSERT_EQ(m.new_tuple.cells.size(), 3u);
  EXPECT_EQ(Text(m.new_tuple.cells[0]), "1");
  EXPECT_EQ(Text(m.new_tuple.cells[1]), "hello");
  EXPECT_EQ(m.new_tuple.cells[2].kind, TupleCell::Kind::kNull);
  // Text cells are views into the message.
  const auto* begin = reinterpret_cast<const char*>(bytes.data());
  EXPECT_GE(m.new_tuple.cells[1].text.data(), begin);
  EXPECT_LE(m.new_tuple.cells[1].text.data() + 5, begin + bytes.size());
}

TEST(DecodeMessageTest, UpdateWithoutOldTuple) {
  const auto m_bytes = UpdateNoOldBytes();  // the tuples are views into it
  auto m = DecodeAs<UpdateMessage>(m_bytes);
  EXPECT_EQ(m.old_kind, OldTupleKind::kNone);
  EXPECT_TRUE(m.old_tuple.cells.empty());
  ASSERT_EQ(m.new_tuple.cells.size(), 3u);
  EXPECT_EQ(m.new_tuple.cells[2].kind, TupleCell::Kind::kUnchangedToast);
}

TEST(DecodeMessageTest, UpdateWithKey) {
  const auto m_bytes = UpdateKeyBytes();  // the tuples are views into it
  auto m = DecodeAs<UpdateMessage>(m_bytes);
  EXPECT_EQ(m.old_kind, OldTupleKind::kKey);
  ASSERT_EQ(m.old_tuple.cells.size(), 3u);
  EXPECT_EQ(Text(m.old_tuple.cells[0]), "1");
  EXPECT_EQ(Text(m.new_tuple.cells[0]), "2");
}

TEST(DecodeMessageTest, UpdateWithFullOldTuple) {
  const auto m_bytes = UpdateFullBytes();  // the tuples are views into it
  auto m = DecodeAs<UpdateMessage>(m_bytes);
  EXPECT_EQ(m.old_kind, OldTupleKind::kFull);
  EXPECT_EQ(Text(m.old_tuple.cells[2]), "long body");
  EXPECT_EQ(Text(m.new_tuple.cells[1]), "new");
  EXPECT_EQ(m.new_tuple.cells[2].kind, TupleCell::Kind::kUnchangedToast);
}

TEST(DecodeMessageTest, Delete) {
  const auto k_bytes = DeleteKeyBytes();  // the tuples are views into it
  auto k = DecodeAs<DeleteMessage>(k_bytes);
  EXPECT_EQ(k.old_kind, OldTupleKind::kKey);
  EXPECT_EQ(Text(k.old_tuple.cells[0]), "1");
  const auto o_bytes = DeleteFullBytes();  // the tuples are views into it
  auto o = DecodeAs<DeleteMessage>(o_bytes);
  EXPECT_EQ(o.old_kind, OldTupleKind::kFull);
  EXPECT_EQ(Text(o.old_tuple.cells[1]), "");  // an empty text is not a NULL
  EXPECT_EQ(Text(o.old_tuple.cells[2]), "b");
}

TEST(DecodeMessageTest, Truncate) {
  auto m = DecodeAs<TruncateMessage>(TruncateBytes());
  EXPECT_EQ(m.options, TruncateMessage::kCascade | TruncateMessage::kRestartIdentity);
  EXPECT_EQ(m.relation_oids, (std::vector<uint32_t>{16385, 16390}));
}

TEST(DecodeMessageTest, LogicalMessage) {
  const auto bytes = LogicalMessageBytes();  // the content is a view into it
  auto m = DecodeAs<LogicalMessage>(bytes);
  EXPECT_TRUE(m.transactional);
  EXPECT_EQ(m.lsn, 0x99u);
  EXPECT_EQ(m.prefix, "tally");
  EXPECT_EQ(std::string(m.content.begin(), m.content.end()), "abc");
}

TEST(DecodeMessageTest, RefusesUnknownMessageTypes) {
  EXPECT_THAT(DecodeError({}), HasSubstr("empty"));
  // 'S' Stream Start is protocol version 2; 'b' Begin Prepare is version 3.
  EXPECT_THAT(DecodeError(Enc('S').U32(1).U8(1).bytes()),
              HasSubstr("unknown pgoutput message type 'S' 0x53 at byte 0"));
  EXPECT_THAT(DecodeError(Enc('b').bytes()), HasSubstr("unknown pgoutput message type 'b'"));
  EXPECT_THAT(DecodeError({0x00}), HasSubstr("unknown pgoutput message type 0x00"));
}

TEST(DecodeMessageTest, RefusesBinaryAndUnknownCells) {
  auto binary = Enc('I').U32(1).U8('N').U16(1).U8('b').U32(4).U32(7).bytes();
  EXPECT_THAT(DecodeError(binary), HasSubstr("malformed pgoutput Insert message: at byte 8"));
  EXPECT_THAT(DecodeError(binary), HasSubstr("binary format"));
  auto unknown = Enc('I').U32(1).U8('N').U16(2).U8('n').U8('x').bytes();
  EXPECT_THAT(DecodeError(unknown), HasSubstr("at byte 9 of 10"));
  EXPECT_THAT(DecodeError(unknown), HasSubstr("unknown kind 0x78 of column 1"));
}

TEST(DecodeMessageTest, RefusesWrongTupleTags) {
  EXPECT_THAT(DecodeError(Enc('I').U32(1).U8('O').Tuple({"n"}).bytes()),
              HasSubstr("reading the new tuple's tag: 0x4f is not 'N'"));
  EXPECT_THAT(DecodeError(Enc('U').U32(1).U8('X').Tuple({"n"}).bytes()),
              HasSubstr("Update message: at byte 5"));
  EXPECT_THAT(DecodeError(Enc('U').U32(1).U8('K').Tuple({"n"}).U8('K').Tuple({"n"}).bytes()),
              HasSubstr("0x4b is not 'N'"));
  EXPECT_THAT(DecodeError(Enc('D').U32(1).U8('N').Tuple({"n"}).bytes()),
              HasSubstr("0x4e is neither 'K' nor 'O'"));
}

TEST(DecodeMessageTest, RefusesTrailingBytes) {
  for (auto bytes : AllValidMessages()) {
    bytes.push_back(0);
    const std::string error = DecodeError(bytes);
    EXPECT_THAT(error, HasSubstr("1 trailing bytes")) << MessageName(bytes[0]);
    EXPECT_THAT(error, HasSubstr(MessageName(bytes[0])));
  }
}

TEST(DecodeMessageTest, RefusesHugeCountsWithoutAllocating) {
  EXPECT_THAT(DecodeError(Enc('T').U32(0xFFFFFFFF).U8(0).U32(1).bytes()),
              HasSubstr("Truncate message: at byte 6 of 10, reading the relation oids"));
  EXPECT_THAT(DecodeError(Enc('R').U32(1).Str("").Str("t").U8('d').U16(0xFFFF).bytes()),
              HasSubstr("Relation message"));
  EXPECT_THAT(DecodeError(Enc('I').U32(1).U8('N').U16(0xFFFF).bytes()),
              HasSubstr("reading a tuple cell's kind: truncated"));
  EXPECT_THAT(DecodeError(Enc('I').U32(1).U8('N').U16(1).U8('t').U32(0xFFFFFFFF).bytes()),
              HasSubstr("reading a text cell's bytes: truncated, 4294967295 bytes needed"));
  EXPECT_THAT(DecodeError(Enc('M').U8(0).U64(0).Str("p").U32(0x7FFFFFFF).bytes()),
              HasSubstr("reading the content"));
}

// Every proper prefix of every valid message is refused with an error that names the
// message and the offset where the bytes ran out.
TEST(DecodeMessageTest, RefusesEveryTruncation) {
  int prefixes = 0;
  for (const auto& bytes : AllValidMessages()) {
    ASSERT_TRUE(DecodeMessage(bytes).has_value()) << MessageName(bytes[0]);
    for (size_t n = 0; n < bytes.size(); ++n) {
      std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
      auto m = DecodeMessage(prefix);
      ASSERT_FALSE(m.has_value()) << MessageName(bytes[0]) << " prefix " << n;
      EXPECT_EQ(m.error().code, ErrorCode::kCorruption);
      if (n == 0) continue;
      EXPECT_THAT(m.error().message,
                  HasSubstr(std::string("pgoutput ") + MessageName(bytes[0]) + " message"));
      EXPECT_THAT(m.error().message, HasSubstr(" of " + std::to_string(n) + ", reading"));
      ++prefixes;
    }
  }
  EXPECT_GT(prefixes, 300);
}

std::vector<uint8_t> XLogDataBytes(const std::vector<uint8_t>& payload) {
  Enc e('w');
  e.U64(0x10).U64(0x20).U64(12345);
  auto bytes = e.bytes();
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}
std::vector<uint8_t> KeepaliveBytes() { return Enc('k').U64(0x30).U64(999).U8(1).bytes(); }

TEST(DecodeCopyDataTest, XLogData) {
  const auto frame = XLogDataBytes(InsertBytes());
  auto m = DecodeCopyData(frame);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  const auto& x = std::get<XLogData>(*m);
  EXPECT_EQ(x.wal_start, 0x10u);
  EXPECT_EQ(x.wal_end, 0x20u);
  EXPECT_EQ(x.send_time, 12345);
  EXPECT_EQ(x.payload.data(), frame.data() + 25);
  auto inner = DecodeMessage(x.payload);
  ASSERT_TRUE(inner.has_value());
  EXPECT_TRUE(std::holds_alternative<InsertMessage>(*inner));
}

TEST(DecodeCopyDataTest, XLogDataMayBeEmpty) {
  auto m = DecodeCopyData(XLogDataBytes({}));
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(std::get<XLogData>(*m).payload.empty());
}

TEST(DecodeCopyDataTest, Keepalive) {
  auto m = DecodeCopyData(KeepaliveBytes());
  ASSERT_TRUE(m.has_value()) << m.error().message;
  const auto& k = std::get<PrimaryKeepalive>(*m);
  EXPECT_EQ(k.wal_end, 0x30u);
  EXPECT_EQ(k.send_time, 999);
  EXPECT_TRUE(k.reply_requested);
  auto quiet = DecodeCopyData(Enc('k').U64(1).U64(2).U8(0).bytes());
  EXPECT_FALSE(std::get<PrimaryKeepalive>(*quiet).reply_requested);
}

TEST(DecodeCopyDataTest, RefusesMalformedFrames) {
  auto error = [](const std::vector<uint8_t>& frame) {
    auto m = DecodeCopyData(frame);
    EXPECT_FALSE(m.has_value());
    return m ? std::string() : m.error().message;
  };
  EXPECT_THAT(error({}), HasSubstr("empty"));
  EXPECT_THAT(error({'r'}), HasSubstr("unknown frame type 0x72 at byte 0"));
  auto long_keepalive = KeepaliveBytes();
  long_keepalive.push_back(0);
  EXPECT_THAT(error(long_keepalive), HasSubstr("keepalive frame: at byte 18 of 19"));
  for (const auto& frame : {XLogDataBytes({}), KeepaliveBytes()}) {
    for (size_t n = 1; n < frame.size(); ++n) {
      std::vector<uint8_t> prefix(frame.begin(), frame.begin() + n);
      EXPECT_THAT(error(prefix), HasSubstr("at byte")) << n;
    }
  }
}

TEST(StandbyStatusUpdateTest, EncodesThirtyFourBytes) {
  StandbyStatusUpdate u;
  u.write = 0x0102030405060708;
  u.flush = 0x1112131415161718;
  u.apply = 0x2122232425262728;
  u.client_time = -2;
  u.reply_requested = true;
  const std::string bytes = EncodeStandbyStatusUpdate(u);
  ASSERT_EQ(bytes.size(), 34u);
  const std::string expected =
      std::string("r") + "\x01\x02\x03\x04\x05\x06\x07\x08" + "\x11\x12\x13\x14\x15\x16\x17\x18" +
      "\x21\x22\x23\x24\x25\x26\x27\x28" + std::string("\xff\xff\xff\xff\xff\xff\xff\xfe", 8) +
      std::string(1, '\x01');
  EXPECT_EQ(bytes, expected);
  u.reply_requested = false;
  EXPECT_EQ(EncodeStandbyStatusUpdate(u).back(), '\0');
}

// A libFuzzer-style robustness loop: random mutations of valid messages and frames never
// crash (run under ASan+UBSan); whatever decodes has in-bounds views.
TEST(DecodeRobustnessTest, RandomMutationsNeverCrash) {
  std::vector<std::vector<uint8_t>> corpus = AllValidMessages();
  for (const auto& m : AllValidMessages()) corpus.push_back(XLogDataBytes(m));
  corpus.push_back(KeepaliveBytes());
  // Decoded tuples also go through the row conversion of the relation they claim.
  auto relation = DecodeMessage(RelationBytes());
  ASSERT_TRUE(relation.has_value());
  const definitions::SourceSchema schema{
      "posts", {{"body", definitions::Type::kText}, {"id", definitions::Type::kInt64}}};
  auto mapping = MapColumns(std::get<RelationMessage>(*relation), schema);
  ASSERT_TRUE(mapping.has_value()) << mapping.error().message;
  std::vector<definitions::Value> row;
  std::mt19937_64 rng(20240501);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int decoded = 0;
  for (int iter = 0; iter < 20'000; ++iter) {
    std::vector<uint8_t> bytes = corpus[pick(corpus.size())];
    const int mutations = 1 + static_cast<int>(pick(4));
    for (int k = 0; k < mutations; ++k) {
      switch (pick(6)) {
        case 0:  // flip a bit
          if (!bytes.empty()) bytes[pick(bytes.size())] ^= static_cast<uint8_t>(1u << pick(8));
          break;
        case 1:  // a random byte
          if (!bytes.empty()) bytes[pick(bytes.size())] = static_cast<uint8_t>(rng());
          break;
        case 2:  // an extreme byte, often a length or count
          if (!bytes.empty()) bytes[pick(bytes.size())] = pick(2) ? 0xFF : 0x00;
          break;
        case 3:  // truncate
          bytes.resize(pick(bytes.size() + 1));
          break;
        case 4:  // insert a byte
          bytes.insert(bytes.begin() + static_cast<long>(pick(bytes.size() + 1)),
                       static_cast<uint8_t>(rng()));
          break;
        case 5:  // delete a byte
          if (!bytes.empty()) bytes.erase(bytes.begin() + static_cast<long>(pick(bytes.size())));
          break;
      }
    }
    const uint8_t* lo = bytes.data();
    const uint8_t* hi = bytes.data() + bytes.size();
    auto check_tuple = [&](const Tuple& t) {
      for (const auto& c : t.cells) {
        const auto* p = reinterpret_cast<const uint8_t*>(c.text.data());
        if (!c.text.empty()) {
          ASSERT_TRUE(p >= lo && p + c.text.size() <= hi);
        }
      }
    };
    if (auto m = DecodeMessage(bytes)) {
      ++decoded;
      if (auto* i = std::get_if<InsertMessage>(&*m)) {
        check_tuple(i->new_tuple);
        (void)TupleToRow(*mapping, i->new_tuple, nullptr, &row);
      }
      if (auto* u = std::get_if<UpdateMessage>(&*m)) {
        check_tuple(u->old_tuple);
        check_tuple(u->new_tuple);
        const Tuple* old = u->old_kind == OldTupleKind::kNone ? nullptr : &u->old_tuple;
        (void)TupleToRow(*mapping, u->new_tuple, old, &row);
      }
      if (auto* d = std::get_if<DeleteMessage>(&*m)) {
        check_tuple(d->old_tuple);
        (void)TupleToRow(*mapping, d->old_tuple, nullptr, &row);
      }
      if (auto* r = std::get_if<RelationMessage>(&*m)) (void)MapColumns(*r, schema);
    } else {
      ASSERT_EQ(m.error().code, ErrorCode::kCorruption);
      ASSERT_FALSE(m.error().message.empty());
    }
    if (auto f = DecodeCopyData(bytes)) {
      if (auto* x = std::get_if<XLogData>(&*f)) {
        ASSERT_TRUE(x->payload.empty() ||
                    (x->payload.data() >= lo && x->payload.data() + x->payload.size() <= hi));
        (void)DecodeMessage(x->payload);
      }
    }
  }
  EXPECT_GT(decoded, 100);  // the mutations are not all rejected at the first byte
}

}  // namespace
}  // namespace tally::postgres
