// Fuzzes what a streaming reader parses of files an agent writes (client/version_stream.h): the
// records of a staging's chunk record (store::ParseChunkRecords) and the channel's abort log
// (store::FindAbortReasonIn). Arbitrary bytes must give chunks below the count and a consumed
// length of whole records inside the input, or a reason from the log's own bytes; never a crash.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "store/abort_log.h"
#include "store/chunk_record.h"

using namespace weightcast;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t chunk_count = data[0];
  std::span<const uint8_t> bytes(data + 1, size - 1);
  std::vector<ChunkIndex> chunks;
  const size_t consumed = store::ParseChunkRecords(bytes, chunk_count, chunks);
  if (consumed > bytes.size() || consumed % store::kRecordBytes != 0 ||
      chunks.size() != consumed / store::kRecordBytes) {
    std::abort();
  }
  for (ChunkIndex c : chunks) {
    if (c.value() >= chunk_count) std::abort();
  }
  const std::string_view log(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (auto reason = store::FindAbortReasonIn(log, Version(data[0] + 1))) {
    if (reason->size() > log.size() || reason->find('\n') != std::string::npos) std::abort();
  }
  return 0;
}
