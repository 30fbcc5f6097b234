// The change decoder: simdjson's DOM parser over the whole body, then one walk per change
// over the parsed values, converting each row cell to its column's type.
//
// Why DOM rather than On-Demand: the DOM parser lives in libsimdjson and dispatches at run
// time to the best kernel of the CPU (AVX2, AVX-512), while On-Demand is compiled into
// this file for the build's target (plain x86-64: simdjson's slow fallback kernel). And
// DOM validates the whole body before anything is decoded, as the all-or-nothing contract
// wants: invalid JSON in a column nobody reads still fails the request.
//
// The body's form: parse_many() over the whole body, in one batch, yields its top-level
// values. A first value that is an array is the whole body and its elements are the
// changes; otherwise every value is a change (one object, or JSON lines). simdjson says
// what is wrong with invalid JSON but not where: on that path only, a small strict scanner
// (ErrorLocator) finds the byte.
//
// Memory: text cells and ids are copied into an arena of the decoder (parse_many reuses
// the parser's string buffer for each value of the stream), and rows come from a pool of
// vectors kept across calls: once warm, decoding allocates nothing.
#include "engine/derived/change_json.h"

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include "core/timestamp.h"
#include "core/utf8.h"
#include "engine/definitions/numeric.h"

namespace tally::derived {

using definitions::Type;
using definitions::Value;

namespace {

namespace dom = simdjson::dom;

// How many bytes of a received string a message shows.
constexpr size_t kShownBytes = 40;

// `text` as a JSON string for a message: escaped, and cut after kShownBytes (at a UTF-8
// boundary) with "..." when longer.
std::string Quoted(std::string_view text) {
  size_t shown = text.size();
  if (shown > kShownBytes) {
    shown = kShownBytes;
    while (shown > 0 && (static_cast<unsigned char>(text[shown]) & 0xC0) == 0x80) --shown;
  }
  std::string out = "\"";
  for (const char c : text.substr(0, shown)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  if (shown < text.size()) out += "...";
  out.push_back('"');
  return out;
}

// What a JSON value is, for "got ..." in messages.
std::string_view JsonKind(dom::element_type type) {
  switch (type) {
    case dom::element_type::ARRAY:
      return "an array";
    case dom::element_type::OBJECT:
      return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
    case dom::element_type::DOUBLE:
      return "a number";
    case dom::element_type::STRING:
      return "a string";
    case dom::element_type::BOOL:
      return "a boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "a value";
}

// What a cell of `type` must be, for "must be ..." in messages.
std::string_view Expectation(Type type) {
  switch (type) {
    case Type::kInt64:
      return "an int64";
    case Type::kBool:
      return "a bool";
    case Type::kText:
      return "a string";
    case Type::kTimestamp:
      return "a timestamp like \"2024-05-01T13:45:00Z\"";
    case Type::kNumeric:
      return "a decimal like \"1234.50\" or 1234.5";
    case Type::kFloat:
      return "a number";
    case Type::kNull:
      break;
  }
  return "null";
}

// ---- Where invalid JSON is -------------------------------------------------------------

// The offset of the first byte that is not UTF-8, or nullopt.
std::optional<size_t> FindInvalidUtf8(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const size_t length = Utf8MultiByteLength(text, at);
    if (length == 0) return at;
    at += length;
  }
  return std::nullopt;
}

// A strict JSON scanner (RFC 8259 with simdjson's limits: 1024 levels of nesting, integers
// within 64 bits, finite numbers) over whitespace-separated values. It runs only after
// simdjson refused a body: simdjson says what is wrong, this says where.
class ErrorLocator {
 public:
  explicit ErrorLocator(std::string_view text) : text_(text) {}

  // The offset of the first offending byte, or nullopt when the scanner finds none.
  std::optional<size_t> Find() {
    SkipSpace();
    while (at_ < text_.size()) {
      if (!ParseValue(0)) return error_;
      SkipSpace();
    }
    return std::nullopt;
  }

 private:
  static constexpr int kMaxDepth = 1024;

  bool Fail(size_t at) {
    error_ = at;
    return false;
  }
  bool At(char c) const { return at_ < text_.size() && text_[at_] == c; }
  bool AtDigit() const { return at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; }
  void SkipDigits() {
    while (AtDigit()) ++at_;
  }
  void SkipSpace() {
    while (At(' ') || At('\t') || At('\n') || At('\r')) ++at_;
  }
  // True when a scalar may end here.
  bool AtDelimiter() const {
    return at_ == text_.size() || At(' ') || At('\t') || At('\n') || At('\r') || At(',') ||
           At(']') || At('}');
  }

  bool ParseValue(int depth) {
    if (at_ >= text_.size()) return Fail(at_);
    switch (text_[at_]) {
      case '{':
      case '[':
        return ParseContainer(depth + 1);
      case '"':
        return ParseString();
      case 't':
        return ParseLiteral("true");
      case 'f':
        return ParseLiteral("false");
      case 'n':
        return ParseLiteral("null");
      default:
        if (At('-') || AtDigit()) return ParseNumber();
        return Fail(at_);
    }
  }

  bool ParseContainer(int depth) {
    const bool object = At('{');
    const char close = object ? '}' : ']';
    if (depth > kMaxDepth) return Fail(at_);
    ++at_;
    SkipSpace();
    if (At(close)) {
      ++at_;
      return true;
    }
    while (true) {
      if (object) {
        if (!At('"')) return Fail(at_);
        if (!ParseString()) return false;
        SkipSpace();
        if (!At(':')) return Fail(at_);
        ++at_;
        SkipSpace();
      }
      if (!ParseValue(depth)) return false;
      SkipSpace();
      if (At(',')) {
        ++at_;
        SkipSpace();
        continue;
      }
      if (At(close)) {
        ++at_;
        return true;
      }
      return Fail(at_);
    }
  }

  bool ParseLiteral(std::string_view word) {
    const size_t start = at_;
    if (text_.substr(at_, word.size()) != word) return Fail(start);
    at_ += word.size();
    return AtDelimiter() || Fail(start);
  }

  // Four hex digits at text_[at] into *out.
  bool Hex4(size_t at, unsigned* out) const {
    if (at + 4 > text_.size()) return false;
    unsigned value = 0;
    for (size_t i = 0; i < 4; ++i) {
      const char c = text_[at + i];
      unsigned digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<unsigned>(c - 'A' + 10);
      } else {
        return false;
      }
      value = value * 16 + digit;
    }
    *out = value;
    return true;
  }

  bool ParseString() {
    const size_t start = at_;
    ++at_;
    while (true) {
      if (at_ >= text_.size()) return Fail(start);
      const auto c = static_cast<unsigned char>(text_[at_]);
      if (c == '"') {
        ++at_;
        return true;
      }
      if (c < 0x20) return Fail(at_);
      if (c >= 0x80) {
        const size_t length = Utf8MultiByteLength(text_, at_);
        if (length == 0) return Fail(at_);
        at_ += length;
        continue;
      }
      if (c != '\\') {
        ++at_;
        continue;
      }
      const size_t escape = at_;
      if (at_ + 1 >= text_.size()) return Fail(escape);
      const char kind = text_[at_ + 1];
      if (std::string_view("\"\\/bfnrt").find(kind) != std::string_view::npos) {
        at_ += 2;
        continue;
      }
      unsigned unit = 0;
      if (kind != 'u' || !Hex4(at_ + 2, &unit)) return Fail(escape);
      at_ += 6;
      if (unit >= 0xDC00 && unit <= 0xDFFF) return Fail(escape);
      if (unit >= 0xD800 && unit <= 0xDBFF) {
        unsigned low = 0;
        if (!At('\\') || at_ + 1 >= text_.size() || text_[at_ + 1] != 'u' || !Hex4(at_ + 2, &low) ||
            low < 0xDC00 || low > 0xDFFF) {
          return Fail(escape);
        }
        at_ += 6;
      }
    }
  }

  bool ParseNumber() {
    const size_t start = at_;
    const bool negative = At('-');
    if (negative) ++at_;
    if (!AtDigit()) return Fail(start);
    if (At('0')) {
      ++at_;
    } else {
      SkipDigits();
    }
    const size_t integer_end = at_;
    bool integer = true;
    int64_t exponent = 0;
    if (At('.')) {
      ++at_;
      if (!AtDigit()) return Fail(start);
      SkipDigits();
      integer = false;
    }
    if (At('e') || At('E')) {
      ++at_;
      const bool negative_exponent = At('-');
      if (At('+') || At('-')) ++at_;
      if (!AtDigit()) return Fail(start);
      for (; AtDigit(); ++at_)
        exponent = std::min<int64_t>(exponent * 10 + (text_[at_] - '0'), 1 << 20);
      if (negative_exponent) exponent = -exponent;
      integer = false;
    }
    if (!AtDelimiter()) return Fail(start);
    const std::string_view number = text_.substr(start, at_ - start);
    if (integer) {
      // simdjson keeps integers in [-2^63, 2^64 - 1].
      uint64_t magnitude = 0;
      const std::string_view digits =
          text_.substr(start + (negative ? 1 : 0), integer_end - start - (negative ? 1 : 0));
      for (const char c : digits) {
        const auto digit = static_cast<uint64_t>(c - '0');
        if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) return Fail(start);
        magnitude = magnitude * 10 + digit;
      }
      if (negative && magnitude > (uint64_t{1} << 63)) return Fail(start);
      return true;
    }
    double value = 0;
    const auto result = std::from_chars(number.data(), number.data() + number.size(), value);
    // Out of range with a non-negative exponent is an overflow (an error to simdjson); with
    // a negative one an underflow to 0, which simdjson accepts.
    if (result.ec == std::errc::result_out_of_range && exponent >= 0) return Fail(start);
    return true;
  }

  std::string_view text_;
  size_t at_ = 0;
  size_t error_ = 0;
};

// "invalid JSON: <simdjson's reason> near byte N" for a body simdjson refused.
tl::unexpected<Error> InvalidJson(std::string_view body, simdjson::error_code code) {
  std::optional<size_t> at =
      code == simdjson::UTF8_ERROR ? FindInvalidUtf8(body) : ErrorLocator(body).Find();
  std::string message = fmt::format("invalid JSON: {}", simdjson::error_message(code));
  while (!message.empty() && message.back() == '.') message.pop_back();
  if (at) message += fmt::format(" near byte {}", *at);
  return InvalidArgument(std::move(message));
}

tl::unexpected<Error> ChangeError(size_t number, std::string_view message) {
  return InvalidArgument(fmt::format("change {}: {}", number, message));
}

// Copies of strings, in blocks that never move: views stay valid until Reset.
class TextArena {
 public:
  // Drops every copy; keeps one block of at least `hint` bytes.
  void Reset(size_t hint) {
    if (blocks_.empty() || capacity_ < hint) {
      blocks_.clear();
      capacity_ = std::max(hint, kMinBlock);
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(capacity_));
    } else {
      blocks_.resize(1);
    }
    next_ = blocks_.front().get();
    left_ = capacity_;
  }

  std::string_view Copy(std::string_view text) {
    if (text.size() > left_) {
      const size_t size = std::max(text.size(), kMinBlock);
      blocks_.push_back(std::make_unique_for_overwrite<char[]>(size));
      next_ = blocks_.back().get();
      left_ = size;
    }
    if (!text.empty()) std::memcpy(next_, text.data(), text.size());
    const std::string_view copy(next_, text.size());
    next_ += text.size();
    left_ -= text.size();
    return copy;
  }

 private:
  static constexpr size_t kMinBlock = 4096;
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t capacity_ = 0;  // of blocks_.front()
  char* next_ = nullptr;
  size_t left_ = 0;
};

}  // namespace

struct ChangeDecoder::Impl {
  // A source met in the current body.
  struct Source {
    const SourceView* view = nullptr;
    std::string name;
    // Column name -> index, built at the first lookup that misses the guess (wide schemas).
    absl::flat_hash_map<std::string_view, int32_t> columns;
  };

  dom::parser parser;
  std::unique_ptr<char[]> padded;  // the body and simdjson's padding
  size_t padded_capacity = 0;
  TextArena arena;
  std::vector<DecodedChange> changes;  // the first `count` are the result
  size_t count = 0;
  std::vector<std::vector<Value>> spare_rows;  // row vectors of earlier calls, for reuse
  std::vector<Source> sources;
  size_t last_source = 0;      // index in sources of the previous change's source
  std::vector<uint32_t> seen;  // per column: == stamp when the current row had it
  uint32_t stamp = 0;
  absl::flat_hash_set<std::string_view> unknown_keys;  // of the current row

  Result<std::span<const DecodedChange>> Decode(std::string_view body, const SourceLookup& lookup);

 private:
  void Recycle();
  Status DecodeChange(dom::element element, size_t number, const SourceLookup& lookup);
  Result<size_t> FindSource(std::string_view name, size_t number, const SourceLookup& lookup);
  int32_t FindColumn(Source& source, std::string_view name, size_t guess);
  Status DecodeRow(dom::element element, std::string_view which, size_t number, Source& source,
                   std::vector<Value>* row);
  Status DecodeCell(dom::element value, const definitions::SourceSchema::Column& column,
                    std::string_view read_by, std::string_view which, size_t number, Value* cell);
};

void ChangeDecoder::Impl::Recycle() {
  for (size_t i = 0; i < count; ++i) {
    for (std::optional<std::vector<Value>>* row : {&changes[i].old_row, &changes[i].new_row}) {
      if (row->has_value()) {
        spare_rows.push_back(std::move(**row));
        row->reset();
      }
    }
  }
  count = 0;
  sources.clear();
  last_source = 0;
}

Result<std::span<const DecodedChange>> ChangeDecoder::Impl::Decode(std::string_view body,
                                                                   const SourceLookup& lookup) {
  Recycle();
  arena.Reset(body.size());
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return InvalidArgument(
        "empty body: send a change object, a JSON array of changes or JSON lines");
  }
  const size_t padded_size = body.size() + simdjson::SIMDJSON_PADDING;
  if (padded_capacity < padded_size) {
    padded_capacity = std::max(padded_size, padded_capacity * 2);
    padded = std::make_unique_for_overwrite<char[]>(padded_capacity);
  }
  std::memcpy(padded.get(), body.data(), body.size());
  std::memset(padded.get() + body.size(), 0, simdjson::SIMDJSON_PADDING);

  // One batch for the whole body: simdjson then sees every value at once.
  const size_t batch_size = std::max<size_t>(body.size(), simdjson::dom::MINIMAL_BATCH_SIZE);
  dom::document_stream stream;
  if (auto error = parser.parse_many(padded.get(), body.size(), batch_size).get(stream)) {
    return InvalidJson(body, error);
  }
  size_t values = 0;
  size_t number = 0;
  bool array = false;
  for (auto it = stream.begin(); it != stream.end(); ++it) {
    dom::element root;
    if (auto error = (*it).get(root)) return InvalidJson(body, error);
    if (array) {
      return InvalidArgument(fmt::format(
          "a JSON array of changes must be the whole body, but more JSON follows at byte {}",
          it.current_index()));
    }
    if (++values == 1 && root.type() == dom::element_type::ARRAY) {
      array = true;
      const dom::array elements = root.get_array().value_unsafe();
      for (dom::element element : elements) {
        if (auto s = DecodeChange(element, ++number, lookup); !s) return tl::unexpected(s.error());
      }
      continue;
    }
    if (auto s = DecodeChange(root, ++number, lookup); !s) return tl::unexpected(s.error());
  }
  // parse_many stops silently before an incomplete last value (an unclosed string or
  // bracket): parse that rest alone for simdjson's reason.
  if (const size_t truncated = stream.truncated_bytes(); truncated != 0) {
    const size_t start = body.size() - truncated;
    dom::element ignored;
    auto error = parser.parse(padded.get() + start, truncated, false).get(ignored);
    return InvalidJson(body, error ? error : simdjson::TAPE_ERROR);
  }
  return std::span<const DecodedChange>(changes.data(), count);
}

Result<size_t> ChangeDecoder::Impl::FindSource(std::string_view name, size_t number,
                                               const SourceLookup& lookup) {
  if (last_source < sources.size() && sources[last_source].name == name) return last_source;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].name == name) return last_source = i;
  }
  const SourceView* view = lookup(name);
  if (view == nullptr || view->schema == nullptr) {
    return ChangeError(number, fmt::format("unknown source {}", Quoted(name)));
  }
  Source& source = sources.emplace_back();
  source.view = view;
  source.name = name;
  const size_t columns = view->schema->columns.size();
  if (seen.size() < columns) seen.resize(columns, 0);
  return last_source = sources.size() - 1;
}

int32_t ChangeDecoder::Impl::FindColumn(Source& source, std::string_view name, size_t guess) {
  const auto& columns = source.view->schema->columns;
  // Rows usually list their columns in the schema's order: try the one after the last.
  if (guess < columns.size() && columns[guess].name == name) return static_cast<int32_t>(guess);
  static constexpr size_t kScanUpTo = 16;
  if (columns.size() <= kScanUpTo) {
    for (size_t i = 0; i < columns.size(); ++i) {
      if (columns[i].name == name) return static_cast<int32_t>(i);
    }
    return -1;
  }
  if (source.columns.empty()) {
    for (size_t i = 0; i < columns.size(); ++i) {
      source.columns.emplace(columns[i].name, static_cast<int32_t>(i));
    }
  }
  const auto found = source.columns.find(name);
  return found == source.columns.end() ? -1 : found->second;
}

Status ChangeDecoder::Impl::DecodeChange(dom::element element, size_t number,
                                         const SourceLookup& lookup) {
  if (element.type() != dom::element_type::OBJECT) {
    return ChangeError(
        number, fmt::format("a change must be a JSON object, got {}", JsonKind(element.type())));
  }
  // The fields first, in any order: the rows need the source.
  enum Field { kSource, kId, kOld, kNew, kFields };
  static constexpr std::string_view kNames[kFields] = {"source", "id", "old", "new"};
  dom::element fields[kFields];
  bool present[kFields] = {};
  const dom::object object = element.get_object().value_unsafe();
  for (dom::key_value_pair field : object) {
    const auto* name = std::find(std::begin(kNames), std::end(kNames), field.key);
    if (name == std::end(kNames)) {
      return ChangeError(number, fmt::format("unknown key {}: a change has \"source\", \"id\", "
                                             "\"old\" and \"new\"",
                                             Quoted(field.key)));
    }
    const auto index = static_cast<size_t>(name - std::begin(kNames));
    if (present[index]) return ChangeError(number, fmt::format("duplicate key {}", Quoted(*name)));
    present[index] = true;
    fields[index] = field.value;
  }

  if (!present[kSource]) return ChangeError(number, "missing \"source\"");
  if (fields[kSource].type() != dom::element_type::STRING) {
    return ChangeError(number, fmt::format("\"source\" must be a string, got {}",
                                           JsonKind(fields[kSource].type())));
  }
  auto source_index = FindSource(fields[kSource].get_string().value_unsafe(), number, lookup);
  if (!source_index) return tl::unexpected(source_index.error());

  std::string_view id;
  if (present[kId]) {
    const dom::element& value = fields[kId];
    if (value.type() != dom::element_type::STRING) {
      return ChangeError(
          number, fmt::format("\"id\" must be a non-empty string, got {}", JsonKind(value.type())));
    }
    id = value.get_string().value_unsafe();
    if (id.empty()) return ChangeError(number, "\"id\" must be a non-empty string, got \"\"");
    id = arena.Copy(id);
  }

  const bool has_old = present[kOld] && !fields[kOld].is_null();
  const bool has_new = present[kNew] && !fields[kNew].is_null();
  if (!has_old && !has_new) {
    return ChangeError(number,
                       "a change needs \"old\" (before an update or delete), \"new\" "
                       "(after an insert or update) or both");
  }

  if (count == changes.size()) changes.emplace_back();
  DecodedChange& change = changes[count++];
  Source& source = sources[*source_index];
  change.source = source.view;
  change.id = id;
  for (const Field which : {kOld, kNew}) {
    if (which == kOld ? !has_old : !has_new) continue;
    std::vector<Value> row;
    if (!spare_rows.empty()) {
      row = std::move(spare_rows.back());
      spare_rows.pop_back();
    }
    Status decoded = DecodeRow(fields[which], kNames[which], number, source, &row);
    (which == kOld ? change.old_row : change.new_row) = std::move(row);
    if (!decoded) return decoded;
  }
  return OkStatus();
}

Status ChangeDecoder::Impl::DecodeRow(dom::element element, std::string_view which, size_t number,
                                      Source& source, std::vector<Value>* row) {
  if (element.type() != dom::element_type::OBJECT) {
    return ChangeError(number, fmt::format("\"{}\" must be an object (a row) or null, got {}",
                                           which, JsonKind(element.type())));
  }
  const SourceView& view = *source.view;
  const auto& columns = view.schema->columns;
  row->assign(columns.size(), Value::Null());
  if (++stamp == 0) {  // wrapped: forget every old stamp
    std::fill(seen.begin(), seen.end(), 0);
    stamp = 1;
  }
  if (!unknown_keys.empty()) unknown_keys.clear();
  size_t found = 0;
  size_t guess = 0;
  const dom::object object = element.get_object().value_unsafe();
  for (dom::key_value_pair field : object) {
    const int32_t index = FindColumn(source, field.key, guess);
    if (index < 0) {
      // Not a column of the source: ignored, but a key twice is still refused.
      if (!unknown_keys.insert(field.key).second) {
        return ChangeError(number,
                           fmt::format("\"{}\".{} appears twice", which, Quoted(field.key)));
      }
      continue;
    }
    const auto column = static_cast<size_t>(index);
    if (seen[column] == stamp) {
      return ChangeError(number, fmt::format("\"{}\".{} appears twice", which, Quoted(field.key)));
    }
    seen[column] = stamp;
    ++found;
    guess = column + 1;
    const std::string_view read_by =
        column < view.read_by.size() ? std::string_view(view.read_by[column]) : "";
    if (auto s = DecodeCell(field.value, columns[column], read_by, which, number, &(*row)[column]);
        !s) {
      return s;
    }
  }
  if (found < columns.size()) {
    for (size_t i = 0; i < columns.size() && i < view.read_by.size(); ++i) {
      if (seen[i] != stamp && !view.read_by[i].empty()) {
        return ChangeError(number, fmt::format("\"{}\" has no column {}, which counter {} reads",
                                               which, Quoted(columns[i].name), view.read_by[i]));
      }
    }
  }
  return OkStatus();
}

Status ChangeDecoder::Impl::DecodeCell(dom::element value,
                                       const definitions::SourceSchema::Column& column,
                                       std::string_view read_by, std::string_view which,
                                       size_t number, Value* cell) {
  const dom::element_type kind = value.type();
  if (kind == dom::element_type::NULL_VALUE) return OkStatus();  // the cell stays NULL
  auto refuse = [&](std::string_view got) {
    return ChangeError(
        number,
        fmt::format(
            "\"{}\".{} must be {}{}, got {}", which, Quoted(column.name), Expectation(column.type),
            read_by.empty() ? std::string() : fmt::format(" (counter {} reads it)", read_by), got));
  };
  switch (column.type) {
    case Type::kInt64:
      if (kind == dom::element_type::INT64) {
        *cell = Value::Int(value.get_int64().value_unsafe());
        return OkStatus();
      }
      if (kind == dom::element_type::UINT64) {
        return refuse(
            fmt::format("{}, which is out of the int64 range", value.get_uint64().value_unsafe()));
      }
      if (kind == dom::element_type::DOUBLE) {
        std::string number_text = fmt::format("{}", value.get_double().value_unsafe());
        if (number_text.find_first_not_of("-0123456789") == std::string::npos) {
          number_text += ".0";
        }
        return refuse(fmt::format("{} (a number with a fraction or an exponent)", number_text));
      }
      return refuse(JsonKind(kind));
    case Type::kBool:
      if (kind != dom::element_type::BOOL) return refuse(JsonKind(kind));
      *cell = Value::Bool(value.get_bool().value_unsafe());
      return OkStatus();
    case Type::kText:
      if (kind != dom::element_type::STRING) return refuse(JsonKind(kind));
      *cell = Value::Text(arena.Copy(value.get_string().value_unsafe()));
      return OkStatus();
    case Type::kTimestamp: {
      if (kind != dom::element_type::STRING) return refuse(JsonKind(kind));
      const std::string_view text = value.get_string().value_unsafe();
      const Result<int64_t> micros = ParseTimestamp(text);
      if (!micros) return refuse(Quoted(text));
      *cell = Value::Timestamp(*micros);
      return OkStatus();
    }
    case Type::kNumeric: {
      // Exact: a string or an integer as written, a number with a fraction through its
      // shortest spelling (definitions/numeric.h).
      Result<int64_t> units = InvalidArgument("");
      if (kind == dom::element_type::STRING) {
        units = definitions::ParseDecimal(value.get_string().value_unsafe(), column.scale);
      } else if (kind == dom::element_type::INT64) {
        units = definitions::ParseDecimal(fmt::format("{}", value.get_int64().value_unsafe()),
                                          column.scale);
      } else if (kind == dom::element_type::UINT64) {
        units = definitions::ParseDecimal(fmt::format("{}", value.get_uint64().value_unsafe()),
                                          column.scale);
      } else if (kind == dom::element_type::DOUBLE) {
        units = definitions::DecimalOfDouble(value.get_double().value_unsafe(), column.scale);
      } else {
        return refuse(JsonKind(kind));
      }
      if (!units) {
        return ChangeError(
            number,
            fmt::format(
                "\"{}\".{}: {}{}", which, Quoted(column.name), units.error().message,
                read_by.empty() ? std::string() : fmt::format(" (counter {} reads it)", read_by)));
      }
      *cell = Value::Numeric(*units, column.scale);
      return OkStatus();
    }
    case Type::kFloat:
      if (kind != dom::element_type::INT64 && kind != dom::element_type::UINT64 &&
          kind != dom::element_type::DOUBLE) {
        return refuse(JsonKind(kind));
      }
      *cell = Value::Float(value.get_double().value_unsafe());
      return OkStatus();
    case Type::kNull:
      break;
  }
  return refuse(JsonKind(kind));
}

ChangeDecoder::ChangeDecoder() : impl_(std::make_unique<Impl>()) {}
ChangeDecoder::~ChangeDecoder() = default;

Result<std::span<const DecodedChange>> ChangeDecoder::Decode(std::string_view body,
                                                             const SourceLookup& lookup) {
  return impl_->Decode(body, lookup);
}

Result<Value> ParseKeyPart(Type type, std::string_view text) {
  if (text == "\\N") return Value::Null();
  switch (type) {
    case Type::kInt64: {
      int64_t value = 0;
      const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
      if (result.ec == std::errc::result_out_of_range && result.ptr == text.data() + text.size()) {
        return InvalidArgument(fmt::format("{} is out of the int64 range", Quoted(text)));
      }
      if (text.empty() || result.ec != std::errc() || result.ptr != text.data() + text.size()) {
        return InvalidArgument(fmt::format("{} is not an int64", Quoted(text)));
      }
      return Value::Int(value);
    }
    case Type::kBool:
      if (text == "true") return Value::Bool(true);
      if (text == "false") return Value::Bool(false);
      return InvalidArgument(fmt::format("{} is not a bool (true or false)", Quoted(text)));
    case Type::kText:
      return Value::Text(text);
    case Type::kTimestamp: {
      const Result<int64_t> micros = ParseTimestamp(text);
      if (!micros) {
        return InvalidArgument(fmt::format(
            "{} is not a timestamp (2024-05-01T13:45:00Z or 20240501T134500Z)", Quoted(text)));
      }
      return Value::Timestamp(*micros);
    }
    case Type::kNumeric:  // never a key column
    case Type::kFloat:
    case Type::kNull:
      break;
  }
  return InvalidArgument(fmt::format("{} is not NULL (\\N)", Quoted(text)));
}

}  // namespace tally::derived
