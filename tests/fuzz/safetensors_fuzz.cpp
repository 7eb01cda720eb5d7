// libFuzzer target for the safetensors header parser (formats/safetensors.h): any bytes must give
// a clean Status or a header whose invariants hold; an accepted header survives writer -> parser.
#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "core/check.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto h = pg::parse_safetensors_header(bytes, "fuzz.safetensors");
  if (!h.ok()) {
    PG_CHECK(!h.status().message().empty(), "error without a message");
    return 0;
  }
  PG_CHECK(h->data_offset >= 8 && h->data_offset <= size, "data_offset {} of {}", h->data_offset, size);
  const uint64_t data_bytes = size - h->data_offset;
  uint64_t covered = 0;
  std::vector<pg::TensorToWrite> ts;
  bool writable = true;
  for (const auto& e : h->entries) {
    PG_CHECK(e.begin <= e.end && e.end <= data_bytes, "'{}' [{}, {}] of {}", e.name, e.begin, e.end, data_bytes);
    auto n = pg::tensor_n_bytes(e.dtype, e.shape, e.name);
    PG_CHECK(n.ok() && *n == e.end - e.begin, "'{}' size", e.name);
    if (e.begin != e.end) {
      PG_CHECK(e.begin == covered, "'{}' not contiguous", e.name);
      covered = e.end;
    }
    if (e.name.empty()) writable = false;  // the writer refuses empty names
    ts.push_back({e.name, e.dtype, e.shape, bytes.subspan(h->data_offset + e.begin, e.end - e.begin)});
  }
  PG_CHECK(covered == data_bytes, "coverage {} of {}", covered, data_bytes);
  if (!writable) return 0;

  // Round trip: what we accept, we can write, and read back identically.
  auto again = pg::serialize_safetensors(ts, h->metadata);
  PG_CHECK(again.ok(), "writer refused an accepted header: {}", again.status().to_string());
  auto h2 = pg::parse_safetensors_header(*again, "roundtrip");
  PG_CHECK(h2.ok(), "re-parse failed: {}", h2.status().to_string());
  PG_CHECK(h2->entries.size() == h->entries.size() && h2->metadata == h->metadata, "round trip changed the header");
  std::map<std::string, const pg::SafetensorsEntry*> by_name;
  for (const auto& e : h->entries) by_name[e.name] = &e;
  for (const auto& e2 : h2->entries) {
    auto it = by_name.find(e2.name);
    PG_CHECK(it != by_name.end(), "round trip invented '{}'", e2.name);
    const pg::SafetensorsEntry& e = *it->second;
    PG_CHECK(e.dtype == e2.dtype && e.shape == e2.shape, "round trip changed '{}'", e.name);
    PG_CHECK(std::equal(again->begin() + h2->data_offset + e2.begin, again->begin() + h2->data_offset + e2.end,
                        bytes.begin() + h->data_offset + e.begin),
             "round trip changed the data of '{}'", e.name);
  }
  return 0;
}
