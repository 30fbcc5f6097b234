// The change decoder: simdjson's DOM parser over the whole body (the framing), then one walk
// per change over the parsed values (the walk), each row cell converted by ConvertCell
// (change_cell.h).
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
// what is wrong with invalid JSON but not where: on that path only, the scanner of
// json_scan.h finds the byte.
//
// Numbers simdjson cannot hold (an integer past 64 bits, 1e400) are valid JSON that it
// refuses as "Problem while parsing a number". On that refusal only, the decoder masks them
// in its copy of the body (json_scan.h: "0.0" and spaces, offsets unchanged) and decodes
// again: a masked number then reads as a number where it is ignored or refused for its type,
// and a refused one is worded from its spelling in the body, found by its path.
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
#include <array>
#include <cstring>

#include "engine/derived/change_cell.h"
#include "engine/derived/json_scan.h"
#include "engine/derived/message_text.h"
#include "engine/derived/text_arena.h"

namespace tally::derived {

using definitions::Value;

namespace {

namespace dom = simdjson::dom;

// "invalid JSON: <simdjson's reason> near byte N" for a body simdjson refused.
tl::unexpected<Error> InvalidJson(std::string_view body, simdjson::error_code code) {
  const std::optional<size_t> at = LocateJsonError(body, code == simdjson::UTF8_ERROR);
  std::string message = fmt::format("invalid JSON: {}", simdjson::error_message(code));
  while (!message.empty() && message.back() == '.') message.pop_back();
  if (at) message += fmt::format(" near byte {}", *at);
  return InvalidArgument(std::move(message));
}

tl::unexpected<Error> ChangeError(size_t number, std::string_view message) {
  return InvalidArgument(fmt::format("change {}: {}", number, message));
}

}  // namespace

struct ChangeDecoder::Impl {
  // A source met in the current body.
  struct Source {
    const SourceView* view = nullptr;
    std::string name;
    // Column name -> index, built at the first lookup that misses the guess (wide schemas).
    absl::flat_hash_map<std::string_view, int32_t> columns;
  };

  // Where the current change is in the body, as json_scan.h counts paths: the top-level
  // value, and its element when the body is an array.
  struct Place {
    uint32_t top = 0;
    std::optional<uint32_t> element;
  };

  dom::parser parser;
  std::unique_ptr<char[]> padded;  // the body and simdjson's padding
  size_t padded_capacity = 0;
  std::string_view body;  // as received, for the spelling of refused numbers
  TextArena arena;
  std::vector<DecodedChange> changes;  // the first `count` are the result
  size_t count = 0;
  std::vector<std::vector<Value>> spare_rows;  // row vectors of earlier calls, for reuse
  std::vector<Source> sources;
  size_t last_source = 0;      // index in sources of the previous change's source
  std::vector<uint32_t> seen;  // per column: == stamp when the current row had it
  uint32_t stamp = 0;
  absl::flat_hash_set<std::string_view> unknown_keys;  // of the current row
  Place place;
  bool masked = false;  // the body's unheld numbers are masked (the second walk)

  Result<std::span<const DecodedChange>> Decode(std::string_view received,
                                                const SourceLookup& lookup);

 private:
  void Recycle();
  Result<std::span<const DecodedChange>> Walk(const SourceLookup& lookup,
                                              simdjson::error_code* json_error);
  Status DecodeChange(dom::element element, size_t number, const SourceLookup& lookup);
  Result<size_t> FindSource(std::string_view name, size_t number, const SourceLookup& lookup);
  int32_t FindColumn(Source& source, std::string_view name, size_t guess);
  Status DecodeRow(dom::element element, std::string_view which, uint32_t field, size_t number,
                   Source& source, std::vector<Value>* row);
  std::optional<std::string_view> SpellingAt(uint32_t field, uint32_t column_field) const;
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

Result<std::span<const DecodedChange>> ChangeDecoder::Impl::Decode(std::string_view received,
                                                                   const SourceLookup& lookup) {
  Recycle();
  arena.Reset(received.size());
  if (received.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return InvalidArgument(
        "empty body: send a change object, a JSON array of changes or JSON lines");
  }
  const size_t padded_size = received.size() + simdjson::SIMDJSON_PADDING;
  if (padded_capacity < padded_size) {
    padded_capacity = std::max(padded_size, padded_capacity * 2);
    padded = std::make_unique_for_overwrite<char[]>(padded_capacity);
  }
  std::memcpy(padded.get(), received.data(), received.size());
  std::memset(padded.get() + received.size(), 0, simdjson::SIMDJSON_PADDING);
  body = received;
  masked = false;

  simdjson::error_code json_error = simdjson::SUCCESS;
  auto result = Walk(lookup, &json_error);
  // A number simdjson cannot hold: mask such numbers and decode again, once.
  if (json_error == simdjson::NUMBER_ERROR && MaskUnheldNumbers(padded.get(), body.size()) > 0) {
    Recycle();
    arena.Reset(body.size());
    masked = true;
    result = Walk(lookup, &json_error);
  }
  return result;
}

Result<std::span<const DecodedChange>> ChangeDecoder::Impl::Walk(const SourceLookup& lookup,
                                                                 simdjson::error_code* json_error) {
  const auto invalid = [&](simdjson::error_code error) {
    *json_error = error;
    return InvalidJson(body, error);
  };
  // One batch for the whole body: simdjson then sees every value at once.
  const size_t batch_size = std::max<size_t>(body.size(), simdjson::dom::MINIMAL_BATCH_SIZE);
  dom::document_stream stream;
  if (auto error = parser.parse_many(padded.get(), body.size(), batch_size).get(stream)) {
    return invalid(error);
  }
  size_t values = 0;
  size_t number = 0;
  bool array = false;
  for (auto it = stream.begin(); it != stream.end(); ++it) {
    dom::element root;
    if (auto error = (*it).get(root)) return invalid(error);
    if (array) {
      return InvalidArgument(fmt::format(
          "a JSON array of changes must be the whole body, but more JSON follows at byte {}",
          it.current_index()));
    }
    place = Place{static_cast<uint32_t>(values), std::nullopt};
    if (++values == 1 && root.type() == dom::element_type::ARRAY) {
      array = true;
      const dom::array elements = root.get_array().value_unsafe();
      uint32_t element = 0;
      for (dom::element change : elements) {
        place.element = element++;
        if (auto s = DecodeChange(change, ++number, lookup); !s) return tl::unexpected(s.error());
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
    return invalid(error ? error : simdjson::TAPE_ERROR);
  }
  return std::span<const DecodedChange>(changes.data(), count);
}

std::optional<std::string_view> ChangeDecoder::Impl::SpellingAt(uint32_t field,
                                                                uint32_t column_field) const {
  std::array<uint32_t, 4> path{place.top};
  size_t depth = 1;
  if (place.element) path[depth++] = *place.element;
  path[depth++] = field;
  path[depth++] = column_field;
  return NumberAt(body, std::span(path.data(), depth));
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
  uint32_t ordinals[kFields] = {};  // each field's place in the object (json_scan.h paths)
  const dom::object object = element.get_object().value_unsafe();
  uint32_t ordinal = 0;
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
    ordinals[index] = ordinal++;
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
    Status decoded = DecodeRow(fields[which], kNames[which], ordinals[which], number, source, &row);
    (which == kOld ? change.old_row : change.new_row) = std::move(row);
    if (!decoded) return decoded;
  }
  return OkStatus();
}

Status ChangeDecoder::Impl::DecodeRow(dom::element element, std::string_view which,
                                      uint32_t field_ordinal, size_t number, Source& source,
                                      std::vector<Value>* row) {
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
  uint32_t ordinal = 0;
  for (dom::key_value_pair field : object) {
    const uint32_t cell_ordinal = ordinal++;
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
    const std::optional<CellRefusal> refusal = ConvertCell(
        field.value, columns[column], arena, masked,
        [&] { return SpellingAt(field_ordinal, cell_ordinal); }, &(*row)[column]);
    if (refusal) {
      const std::string_view read_by =
          column < view.read_by.size() ? std::string_view(view.read_by[column]) : "";
      return ChangeError(
          number,
          fmt::format(
              "\"{}\".{} {}{}, got {}", which, Quoted(columns[column].name), refusal->must,
              read_by.empty() ? std::string() : fmt::format(" (counter {} reads it)", read_by),
              refusal->got));
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

ChangeDecoder::ChangeDecoder() : impl_(std::make_unique<Impl>()) {}
ChangeDecoder::~ChangeDecoder() = default;

Result<std::span<const DecodedChange>> ChangeDecoder::Decode(std::string_view body,
                                                             const SourceLookup& lookup) {
  return impl_->Decode(body, lookup);
}

}  // namespace tally::derived
