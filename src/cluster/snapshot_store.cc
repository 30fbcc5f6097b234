#include "cluster/snapshot_store.h"

#include <fmt/format.h>

#include <vector>

#include "cluster/partition_log.h"
#include "cluster/record_codec.h"

namespace tally::cluster {
namespace {

// Gathers a partition's counters as they are read from the tables into chunks of about
// chunk_bytes, and publishes each one as it fills (the first clears the partition). After a
// failed publish the rest is read but not sent.
class ChunkPublisher final : public engine::LoadVisitor {
 public:
  ChunkPublisher(NatsConnection& connection, const SnapshotStoreOptions& options,
                 std::string subject, RecordHeader header, uint64_t id)
      : connection_(connection),
        options_(options),
        subject_(std::move(subject)),
        header_(header),
        id_(id) {
    batch_.ClearAll();
  }

  void Put(std::string_view key, const engine::CounterRecord& record, engine::LoadSource) override {
    batch_.AddPut(key, record);
    bytes_ += key.size() + 24;
    ++counters_;
    if (bytes_ >= options_.chunk_bytes) Flush();
  }
  void Delete(std::string_view, engine::LoadSource) override {}
  void ClearAll(engine::LoadSource) override {}

  // Publishes what is left (the only chunk of an empty partition: its clear).
  void Flush() {
    if (!status_ || (chunks_ > 0 && batch_.empty())) return;
    std::string message = EncodeChunkPrefix(id_, chunks_);
    std::string record;
    EncodeBatch(header_, batch_, BatchShare::All(batch_), &record);
    message += record;
    Publication publication;
    publication.subject = subject_;
    publication.data = message;
    auto ack = connection_.Publish(publication, options_.publish_timeout_ms);
    if (!ack) {
      status_ = tl::unexpected(ack.error().ToError());
      return;
    }
    if (chunks_ == 0) first_seq_ = ack->seq;
    last_seq_ = ack->seq;
    ++chunks_;
    batch_.Clear();
    bytes_ = 0;
  }

  const Status& status() const { return status_; }
  uint64_t first_seq() const { return first_seq_; }
  uint64_t last_seq() const { return last_seq_; }
  uint64_t chunks() const { return chunks_; }
  uint64_t counters() const { return counters_; }

 private:
  NatsConnection& connection_;
  const SnapshotStoreOptions& options_;
  const std::string subject_;
  const RecordHeader header_;
  const uint64_t id_;
  engine::CommitBatch batch_;
  size_t bytes_ = 0;
  Status status_ = OkStatus();
  uint64_t first_seq_ = 0;
  uint64_t last_seq_ = 0;
  uint64_t chunks_ = 0;
  uint64_t counters_ = 0;
};

}  // namespace

std::string SnapshotStore::ChunkSubject(uint32_t partition) const {
  return fmt::format("{}{}.c", options_.subject_prefix, partition);
}

std::string SnapshotStore::ManifestSubject(uint32_t partition) const {
  return fmt::format("{}{}.m", options_.subject_prefix, partition);
}

Result<SnapshotManifest> SnapshotStore::Write(const storage::ClusterTablesView& view,
                                              uint32_t partition) {
  auto position = view.Position(partition);
  if (!position) return tl::unexpected(position.error());
  if (position->seq == 0 || position->writer == 0) {
    return InvalidArgument(fmt::format("partition {} has no saved position", partition));
  }
  SnapshotManifest manifest;
  manifest.partition = partition;
  manifest.id = NewWriterId();
  manifest.position = *position;
  RecordHeader header;
  header.partition = partition;
  header.term = position->term;
  header.writer = position->writer;
  ChunkPublisher publisher(connection_, options_, ChunkSubject(partition), header, manifest.id);
  if (auto read = view.ReadPartition(partition, publisher); !read)
    return tl::unexpected(read.error());
  publisher.Flush();
  if (!publisher.status()) return tl::unexpected(publisher.status().error());
  manifest.first_seq = publisher.first_seq();
  manifest.last_seq = publisher.last_seq();
  manifest.chunks = publisher.chunks();
  manifest.counters = publisher.counters();

  const std::string text = EncodeManifest(manifest);
  Publication publication;
  const std::string subject = ManifestSubject(partition);
  publication.subject = subject;
  publication.data = text;
  if (auto ack = connection_.Publish(publication, options_.publish_timeout_ms); !ack) {
    return tl::unexpected(ack.error().ToError());
  }
  // Older snapshots of the partition, and chunks of any that never got a manifest.
  if (auto purged =
          connection_.PurgeStream(options_.stream, manifest.first_seq,
                                  fmt::format("{}{}.*", options_.subject_prefix, partition));
      !purged) {
    return tl::unexpected(purged.error().ToError());
  }
  return manifest;
}

Status SnapshotStore::WriteCatalog(const CatalogSnapshot& snapshot) {
  const std::string subject = options_.subject_prefix + "catalog";
  Publication publication;
  publication.subject = subject;
  const std::string data = EncodeCatalogSnapshot(snapshot);
  publication.data = data;
  auto ack = connection_.Publish(publication, options_.publish_timeout_ms);
  if (!ack) return tl::unexpected(ack.error().ToError());
  if (auto purged = connection_.PurgeStream(options_.stream, ack->seq, subject); !purged) {
    return tl::unexpected(purged.error().ToError());
  }
  return OkStatus();
}

Result<std::optional<CatalogSnapshot>> SnapshotStore::LatestCatalog() {
  auto message = connection_.GetLastMessage(options_.stream, options_.subject_prefix + "catalog");
  if (!message) return tl::unexpected(message.error().ToError());
  if (!*message) return std::optional<CatalogSnapshot>();
  auto snapshot = DecodeCatalogSnapshot((*message)->data);
  if (!snapshot) return tl::unexpected(snapshot.error());
  return std::optional<CatalogSnapshot>(std::move(*snapshot));
}

Result<std::optional<SnapshotManifest>> SnapshotStore::Latest(uint32_t partition) {
  auto message = connection_.GetLastMessage(options_.stream, ManifestSubject(partition));
  if (!message) return tl::unexpected(message.error().ToError());
  if (!*message) return std::optional<SnapshotManifest>();
  auto manifest = DecodeManifest((*message)->data);
  if (!manifest) return tl::unexpected(manifest.error());
  if (manifest->partition != partition) {
    return Corruption(fmt::format("the snapshot manifest of partition {} names partition {}",
                                  partition, manifest->partition));
  }
  return std::optional<SnapshotManifest>(*manifest);
}

Result<bool> SnapshotStore::Whole(const SnapshotManifest& manifest) {
  for (const uint64_t seq : {manifest.first_seq, manifest.last_seq}) {
    auto message = connection_.GetMessage(options_.stream, seq);
    if (!message) return tl::unexpected(message.error().ToError());
    if (!*message || (*message)->subject != ChunkSubject(manifest.partition)) return false;
    auto decoded = DecodeChunk((*message)->data);
    if (!decoded || decoded->id != manifest.id) return false;
  }
  return true;
}

Status SnapshotStore::Read(const SnapshotManifest& manifest,
                           const std::function<Status(engine::CommitBatch& batch)>& chunk) {
  // Streamed (an ordered consumer on the partition's chunks from the first one), not asked
  // for one by one: a snapshot of a million counters is a hundred chunks.
  const std::string subject = ChunkSubject(manifest.partition);
  auto consumer = OrderedConsumer::Start(connection_, options_.stream, subject, manifest.first_seq);
  if (!consumer) return tl::unexpected(consumer.error().ToError());
  const auto gone = [&] {
    return MakeError(ErrorCode::kNotFound,
                     fmt::format("snapshot of partition {}: its chunks are gone (replaced by a "
                                 "newer snapshot)",
                                 manifest.partition));
  };
  uint64_t index = 0;
  while (index < manifest.chunks) {
    auto message = (*consumer)->Next(options_.publish_timeout_ms);
    if (!message) return tl::unexpected(message.error().ToError());
    if (!*message || (*message)->seq > manifest.last_seq) return gone();
    auto decoded = DecodeChunk((*message)->data);
    if (!decoded) return tl::unexpected(decoded.error());
    if (decoded->id != manifest.id) continue;  // an unfinished snapshot's
    if (decoded->index != index) {
      return Corruption(fmt::format("snapshot of partition {}: chunk {} where {} was due",
                                    manifest.partition, decoded->index, index));
    }
    auto record = DecodeRecord(decoded->record);
    if (!record) return tl::unexpected(record.error());
    if (record->kind != RecordKind::kBatch || record->header.partition != manifest.partition ||
        record->batch.clear_all() != (index == 0)) {
      return Corruption(fmt::format("snapshot of partition {}: chunk {} is not one of its own",
                                    manifest.partition, index));
    }
    if (auto taken = chunk(record->batch); !taken) return taken;
    ++index;
  }
  return OkStatus();
}

}  // namespace tally::cluster
