// The fast check (docs/verification.md): a payload is trusted once it matched its
// SHA-256 from the signed manifest (CheckedPayload), and the chunk rebuilt from it is checked
// against the manifest's XXH3-128 instead of its SHA-256. A flipped payload bit is refused before
// decoding, a base whose bytes are not what its hash says is caught by the XXH3, and the sha256
// setting really checks SHA-256 (a case only SHA-256 can catch, built below).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "codec/chunk_codec.h"
#include "codec/version_codec.h"

namespace weightcast::codec {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes RandomBytes(std::mt19937_64& rng, size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

Bytes Step(std::mt19937_64& rng, const Bytes& base, double fraction) {
  Bytes t = base;
  std::bernoulli_distribution pick(fraction);
  for (size_t i = 0; i + 2 <= t.size(); i += 2) {
    if (pick(rng)) t[i] ^= static_cast<uint8_t>(1 + rng() % 3);
  }
  return t;
}

Digest Xxh(std::span<const uint8_t> b) { return HashBytes(HashAlgorithm::kXxh3_128, b); }

struct Case {
  Bytes base, target;
  std::vector<Segment> segs;
  EncodedChunk enc;
  Digest target_sha{}, target_xxh{};
};

Case Make(uint64_t seed, Transform transform, double fraction = 0.01, size_t size = 100'000) {
  std::mt19937_64 rng(seed);
  Case c;
  c.base = RandomBytes(rng, size);
  c.target = Step(rng, c.base, fraction);
  c.segs = {{size, 2}};
  ChunkEncodeOptions opt;
  opt.xor_transform = transform;
  opt.try_full_above = 2.0;
  CodecScratch scratch;
  Digest fast{};
  auto enc = EncodeChunkHashing(HashedChunk::Compute(c.base, HashAlgorithm::kSha256), c.target,
                                c.segs, opt, scratch, &c.target_sha, &fast);
  EXPECT_TRUE(enc.ok()) << enc.status().ToString();
  c.enc = *enc;
  c.target_xxh = Xxh(c.target);
  EXPECT_EQ(fast, c.target_xxh) << "the encoder's fast hash is the XXH3-128 of the target";
  EXPECT_EQ(c.target_sha, Sha256(c.target));
  return c;
}

// Every decoder's fast overload, into a fresh buffer; the status of each, and `out` of the first.
std::vector<Status> DecodeAllFast(const CheckedPayload& p, const HashedChunk& base,
                                  const Digest& expected, const Digest& fast, size_t size,
                                  Bytes* out) {
  CodecScratch scratch;
  std::vector<Status> s;
  out->assign(size, 0xEE);
  s.push_back(DecodeChunk(p, base, &expected, fast, *out, scratch));
  Bytes buffer;
  s.push_back(DecodeChunkToBuffer(p, base, &expected, fast, size, buffer, scratch));
  if (s.back().ok() && buffer != *out) s.back() = Internal("to-buffer differs");
  Bytes into(size, 0xEE);
  s.push_back(DecodeChunkUnverifiedInto(p, base, &expected, fast, into, scratch));
  if (s.back().ok() && into != *out) s.back() = Internal("unverified-into differs");
  Bytes streamed;
  s.push_back(DecodeChunkStreaming(
      p, base, &expected, fast, size,
      [&](uint64_t, std::span<const uint8_t> b) {
        streamed.insert(streamed.end(), b.begin(), b.end());
        return Status::Ok();
      },
      scratch));
  if (s.back().ok() && streamed != *out) s.back() = Internal("streamed differs");
  return s;
}

TEST(FastVerify, EveryDecoderRebuildsTheChunkWithTheFastCheck) {
  for (Transform t : {Transform::kSparseDiff, Transform::kSparse, Transform::kPlanes}) {
    Case c = Make(1, t);
    ASSERT_EQ(c.enc.encoding, ChunkEncoding::kXor);
    auto p = CheckedPayload::Check(c.enc.payload, c.enc.payload.size(), Sha256(c.enc.payload));
    ASSERT_TRUE(p.ok());
    Bytes out;
    for (const Status& s : DecodeAllFast(
             *p, HashedChunk::FromVerifiedManifest(c.base, Sha256(c.base), HashAlgorithm::kSha256),
             c.target_sha, c.target_xxh, c.target.size(), &out)) {
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    EXPECT_EQ(out, c.target);
  }
}

// A `full` payload needs no base: its SHA-256 fixes the decoder's only input.
TEST(FastVerify, FullPayloadsUseTheFastCheckToo) {
  std::mt19937_64 rng(3);
  const Bytes target = RandomBytes(rng, 50'000);
  CodecScratch scratch;
  auto enc = EncodeFullChunk(HashedChunk::Compute(target, HashAlgorithm::kSha256),
                             std::vector<Segment>{{50'000, 2}}, {}, scratch);
  ASSERT_TRUE(enc.ok());
  auto p = CheckedPayload::Check(enc->payload, enc->payload.size(), Sha256(enc->payload));
  ASSERT_TRUE(p.ok());
  Bytes out;
  for (const Status& s : DecodeAllFast(*p, HashedChunk::Compute({}, HashAlgorithm::kSha256),
                                       Sha256(target), Xxh(target), target.size(), &out)) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(out, target);
}

TEST(FastVerify, AFlippedPayloadBitIsRefusedBeforeDecoding) {
  Case c = Make(2, Transform::kSparseDiff);
  const Digest listed = Sha256(c.enc.payload);
  for (size_t at : {size_t{0}, size_t{40}, c.enc.payload.size() / 2, c.enc.payload.size() - 1}) {
    for (int bit = 0; bit < 8; bit += 3) {
      Bytes bad = c.enc.payload;
      bad[at] ^= static_cast<uint8_t>(1u << bit);
      auto p = CheckedPayload::Check(bad, bad.size(), listed);
      ASSERT_FALSE(p.ok()) << "byte " << at << " bit " << bit;
      EXPECT_EQ(p.status().code(), Code::kCorrupt);
      // No CheckedPayload exists, so no fast decoder can run on these bytes.
    }
  }
  EXPECT_EQ(CheckedPayload::Check(c.enc.payload, c.enc.payload.size() + 1, listed).status().code(),
            Code::kCorrupt);
  EXPECT_TRUE(CheckedPayload::Check(c.enc.payload, c.enc.payload.size(), listed).ok());
}

// A memory error or a base file changed on disk: the receiver vouches for a base (its manifest
// hash) whose bytes are no longer that. The payload is authentic; only the XXH3 of the result
// can tell, and every decoder refuses (out untouched where the contract says so).
TEST(FastVerify, ABaseThatIsNotWhatItsHashSaysIsCaughtByTheFastHash) {
  for (Transform t : {Transform::kSparseDiff, Transform::kPlanes}) {
    Case c = Make(4, t);
    Bytes rotten = c.base;
    rotten[rotten.size() / 3] ^= 0x10;  // one bit
    const auto base =
        HashedChunk::FromVerifiedManifest(rotten, Sha256(c.base), HashAlgorithm::kSha256);
    auto p = CheckedPayload::Check(c.enc.payload, c.enc.payload.size(), Sha256(c.enc.payload));
    ASSERT_TRUE(p.ok());
    Bytes out;
    const std::vector<Status> s =
        DecodeAllFast(*p, base, c.target_sha, c.target_xxh, c.target.size(), &out);
    for (const Status& st : s) {
      EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
      EXPECT_NE(st.message().find("xxh3-128"), std::string::npos) << st.message();
    }
    EXPECT_EQ(out, Bytes(c.target.size(), 0xEE)) << "DecodeChunk wrote a chunk that failed";
  }
}

// The two settings check different hashes, shown with inputs only one of them can catch.
// (1) A wrong fast hash: the fast check refuses, the SHA-256 check (which never reads it)
//     accepts. (2) A chunk whose SHA-256 in the payload and the manifest is wrong but whose XXH3
//     is right (a publisher that lists a bad SHA-256: the payload says what the manifest says):
//     the fast check accepts, the SHA-256 check refuses, so it really hashed the result with
//     SHA-256.
TEST(FastVerify, TheSha256SettingHashesTheResultWithSha256) {
  Case c = Make(5, Transform::kSparseDiff);
  const auto base =
      HashedChunk::FromVerifiedManifest(c.base, Sha256(c.base), HashAlgorithm::kSha256);
  CodecScratch scratch;
  Bytes out(c.target.size());

  Digest wrong_fast = c.target_xxh;
  wrong_fast[0] ^= 1;
  auto p = CheckedPayload::Check(c.enc.payload, c.enc.payload.size(), Sha256(c.enc.payload));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(DecodeChunk(*p, base, &c.target_sha, wrong_fast, out, scratch).code(), Code::kCorrupt);
  EXPECT_TRUE(DecodeChunk(c.enc.payload, base, &c.target_sha, out, scratch).ok());
  EXPECT_EQ(out, c.target);

  Bytes lying = c.enc.payload;
  Digest wrong_sha = c.target_sha;
  wrong_sha[7] ^= 0x80;
  std::memcpy(lying.data() + 64, wrong_sha.data(), 32);  // the header's target hash
  auto q = CheckedPayload::Check(lying, lying.size(), Sha256(lying));
  ASSERT_TRUE(q.ok());
  Bytes fast_out(c.target.size(), 0);
  EXPECT_TRUE(DecodeChunk(*q, base, &wrong_sha, c.target_xxh, fast_out, scratch).ok());
  EXPECT_EQ(fast_out, c.target);
  Bytes sha_out(c.target.size(), 0xEE);
  const Status s = DecodeChunk(lying, base, &wrong_sha, sha_out, scratch);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_EQ(sha_out, Bytes(c.target.size(), 0xEE));
}

TEST(FastVerify, WrongBaseIsStillAPreconditionFailure) {
  Case c = Make(6, Transform::kSparseDiff);
  std::mt19937_64 rng(9);
  const Bytes other = RandomBytes(rng, c.base.size());
  auto p = CheckedPayload::Check(c.enc.payload, c.enc.payload.size(), Sha256(c.enc.payload));
  ASSERT_TRUE(p.ok());
  CodecScratch scratch;
  Bytes out(c.target.size());
  EXPECT_EQ(DecodeChunk(*p, HashedChunk::Compute(other, HashAlgorithm::kSha256), &c.target_sha,
                        c.target_xxh, out, scratch)
                .code(),
            Code::kFailedPrecondition);
}

TEST(FastVerify, SettingNamesParse) {
  EXPECT_EQ(*ParseVerifyResult("fast"), VerifyResult::kFast);
  EXPECT_EQ(*ParseVerifyResult("sha256"), VerifyResult::kSha256);
  EXPECT_EQ(ParseVerifyResult("xxh3").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(VerifyResultName(VerifyResult::kSha256), "sha256");
  EXPECT_EQ(VerifyResultName(VerifyResult::kFast), "fast");
}

// Whole versions: DecodeVersion with fast hashes in the target manifest.
struct Version2 {
  Manifest base, target;
  Bytes base_bytes, target_bytes;
  std::map<uint32_t, Bytes> payloads;
};

Version2 MakeVersions() {
  std::mt19937_64 rng(12);
  Version2 v;
  const uint64_t chunk = 16 << 10, size = 10 * chunk + 123;
  v.base_bytes = RandomBytes(rng, size);
  v.target_bytes = Step(rng, v.base_bytes, 0.01);
  for (Manifest* m : {&v.base, &v.target}) {
    m->channel = "test";
    m->chunk_size = chunk;
    m->files = {{"a", size, 0}};
    m->tensors = {{"w", DType::kBF16, {size / 2}, 0, 0, size / 2 * 2}};
  }
  v.base.version = Version(1);
  v.target.version = Version(2);
  for (uint32_t i = 0; i < 11; ++i) {
    const ByteRange r = v.base.ChunkRange(ChunkIndex(i));
    v.base.chunk_hashes.push_back(Sha256(std::span(v.base_bytes).subspan(r.offset, r.size)));
    v.target.chunk_hashes.push_back(Sha256(std::span(v.target_bytes).subspan(r.offset, r.size)));
    v.target.fast_hashes.push_back(Xxh(std::span(v.target_bytes).subspan(r.offset, r.size)));
  }
  v.base.root[0] = 1;
  auto info = EncodeVersion(v.base, SnapshotReader::FromMemory(v.base_bytes), v.target,
                            SnapshotReader::FromMemory(v.target_bytes),
                            [&](ChunkIndex i, std::span<const uint8_t> p) {
                              v.payloads[i.value()].assign(p.begin(), p.end());
                              return Status::Ok();
                            });
  EXPECT_TRUE(info.ok());
  EXPECT_EQ(info->payload_hash_algorithm, HashAlgorithm::kSha256);
  v.target.delta = *info;
  return v;
}

Status DecodeAll(const Version2& v, VerifyResult mode, Bytes* out) {
  out->assign(v.target_bytes.size(), 0);
  VersionCodecOptions opt;
  opt.threads = 2;
  opt.verify_result = mode;
  return DecodeVersion(
      v.base, SnapshotReader::FromMemory(v.base_bytes), v.target,
      [&](ChunkIndex i) -> Result<std::span<const uint8_t>> {
        return std::span<const uint8_t>(v.payloads.at(i.value()));
      },
      [&](ChunkIndex i, std::span<const uint8_t> b) {
        std::copy(b.begin(), b.end(), out->begin() + v.target.ChunkRange(i).offset);
        return Status::Ok();
      },
      opt);
}

TEST(FastVerify, DecodeVersionGivesTheSameBytesWithBothSettings) {
  Version2 v = MakeVersions();
  EXPECT_TRUE(UsesFastCheck(v.target, VerifyResult::kFast));
  EXPECT_FALSE(UsesFastCheck(v.target, VerifyResult::kSha256));
  Bytes fast, sha;
  ASSERT_TRUE(DecodeAll(v, VerifyResult::kFast, &fast).ok());
  ASSERT_TRUE(DecodeAll(v, VerifyResult::kSha256, &sha).ok());
  EXPECT_EQ(fast, v.target_bytes);
  EXPECT_EQ(sha, v.target_bytes);
  // A wrong fast hash is seen only by the fast setting.
  v.target.fast_hashes[4][3] ^= 1;
  EXPECT_EQ(DecodeAll(v, VerifyResult::kFast, &fast).code(), Code::kCorrupt);
  EXPECT_TRUE(DecodeAll(v, VerifyResult::kSha256, &sha).ok());
  // A manifest without fast hashes is decoded as before, whatever the setting.
  v.target.fast_hashes.clear();
  EXPECT_FALSE(UsesFastCheck(v.target, VerifyResult::kFast));
  EXPECT_TRUE(DecodeAll(v, VerifyResult::kFast, &fast).ok());
  EXPECT_EQ(fast, v.target_bytes);
}

TEST(FastVerify, DecodeVersionRefusesAFlippedPayloadBit) {
  Version2 v = MakeVersions();
  ASSERT_TRUE(v.payloads.count(2));
  v.payloads[2][v.payloads[2].size() / 2] ^= 4;
  Bytes out;
  const Status s = DecodeAll(v, VerifyResult::kFast, &out);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("payload does not match"), std::string::npos) << s.message();
}

TEST(FastVerify, LocalCopiesAreCheckedByTheFastHashWhenThereIsOne) {
  Version2 v = MakeVersions();
  const ByteRange r = v.target.ChunkRange(ChunkIndex(3));
  Bytes chunk(v.target_bytes.begin() + r.offset, v.target_bytes.begin() + r.end());
  EXPECT_TRUE(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kFast).ok());
  EXPECT_TRUE(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kSha256).ok());
  // Only the fast setting reads the fast hash; only the sha256 setting the chunk hash.
  v.target.fast_hashes[3][0] ^= 1;
  EXPECT_EQ(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kFast).code(),
            Code::kCorrupt);
  EXPECT_TRUE(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kSha256).ok());
  v.target.fast_hashes[3][0] ^= 1;
  v.target.chunk_hashes[3][0] ^= 1;
  EXPECT_TRUE(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kFast).ok());
  EXPECT_EQ(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kSha256).code(),
            Code::kCorrupt);
  chunk[5] ^= 1;
  v.target.chunk_hashes[3][0] ^= 1;
  EXPECT_EQ(CheckLocalCopy(v.target, ChunkIndex(3), chunk, VerifyResult::kFast).code(),
            Code::kCorrupt);
}

}  // namespace
}  // namespace weightcast::codec
