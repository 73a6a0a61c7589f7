#include "codec/chunk_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace weightcast::codec {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes RandomBytes(std::mt19937_64& rng, size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Flips a fraction of the elements of `base` by a small XOR in the low byte, as training does.
Bytes Mutate(std::mt19937_64& rng, const Bytes& base, double fraction, int width) {
  Bytes t = base;
  std::bernoulli_distribution pick(fraction);
  for (size_t i = 0; i + width <= t.size(); i += width) {
    if (pick(rng)) t[i] ^= static_cast<uint8_t>(1 + rng() % 3);
  }
  return t;
}

// Random segments that cover `size` bytes, with every width and odd sizes.
std::vector<Segment> RandomSegments(std::mt19937_64& rng, uint64_t size) {
  std::vector<Segment> segs;
  const uint8_t widths[] = {1, 2, 4, 8};
  uint64_t left = size;
  while (left > 0) {
    const uint64_t n = std::min<uint64_t>(left, 1 + rng() % 5000);
    segs.push_back({n, widths[rng() % 4]});
    left -= n;
  }
  return segs;
}

Status RoundTrip(const Bytes& base, const Bytes& target, std::span<const Segment> segs,
                 const ChunkEncodeOptions& opt, EncodedChunk* encoded_out = nullptr) {
  CodecScratch scratch;
  const auto b = HashedChunk::Compute(base, HashAlgorithm::kSha256);
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kSha256);
  auto enc = EncodeChunk(b, t, segs, opt, scratch);
  if (!enc.ok()) return enc.status();
  if (encoded_out) *encoded_out = enc.value();
  // Hashing while encoding must give the same payload and the target's hash.
  Digest hashed{};
  auto enc2 = EncodeChunkHashing(b, target, segs, opt, scratch, &hashed);
  if (!enc2.ok()) return enc2.status();
  if (hashed != t.hash()) return Internal("EncodeChunkHashing: wrong hash");
  if (enc2->payload != enc->payload || enc2->encoding != enc->encoding) {
    return Internal("EncodeChunkHashing: another payload");
  }
  if (enc->encoding == ChunkEncoding::kSame) {
    return base == target ? Status::Ok() : Internal("same for different bytes");
  }
  Bytes out(target.size(), 0xEE);
  WC_RETURN_IF_ERROR(DecodeChunk(enc->payload, b, &t.hash(), out, scratch));
  if (out != target) return Internal("round trip differs");
  std::vector<uint8_t> buffer(3, 0xEE);
  WC_RETURN_IF_ERROR(
      DecodeChunkToBuffer(enc->payload, b, &t.hash(), target.size(), buffer, scratch));
  if (buffer != target) return Internal("round trip to buffer differs");
  Bytes into(target.size(), 0xEE);
  WC_RETURN_IF_ERROR(DecodeChunkUnverifiedInto(enc->payload, b, &t.hash(), into, scratch));
  if (into != target) return Internal("round trip in place differs");
  // Streaming: blocks arrive front to back, none empty or larger than kDecodeBlock.
  Bytes streamed;
  WC_RETURN_IF_ERROR(DecodeChunkStreaming(
      enc->payload, b, &t.hash(), target.size(),
      [&](uint64_t offset, std::span<const uint8_t> block) -> Status {
        if (offset != streamed.size() || block.empty() || block.size() > kDecodeBlock) {
          return Internal("bad block at " + std::to_string(offset));
        }
        streamed.insert(streamed.end(), block.begin(), block.end());
        return Status::Ok();
      },
      scratch));
  return streamed == target ? Status::Ok() : Internal("streamed round trip differs");
}

TEST(ChunkCodec, RoundTripsRandomChunksWithEveryTransformAndCoder) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 60; ++iter) {
    const size_t size = iter % 10 == 0 ? rng() % 17 : 1 + rng() % 40000;
    const Bytes base = RandomBytes(rng, size);
    const double fraction = std::vector<double>{0.0, 0.001, 0.01, 0.1, 0.5, 1.0}[iter % 6];
    const int width = 1 << (iter % 4);
    Bytes target = Mutate(rng, base, fraction, width);
    if (iter % 7 == 3) target = RandomBytes(rng, size);
    const auto segs = RandomSegments(rng, size);
    for (Coder coder : {Coder::kStored, Coder::kZstd, Coder::kLz4}) {
      for (Transform tr :
           {Transform::kNone, Transform::kPlanes, Transform::kSparse, Transform::kSparseDiff}) {
        ChunkEncodeOptions opt;
        opt.coder = coder;
        opt.xor_transform = tr;
        opt.varint_gaps = (iter % 3) == 0;
        opt.try_full_above = (iter % 2) ? 0.0 : 2.0;
        const Status s = RoundTrip(base, target, segs, opt);
        ASSERT_TRUE(s.ok()) << s.ToString() << " iter " << iter << " size " << size;
      }
    }
  }
}

// The decoder patches and hashes sparse chunks in blocks; elements cut by a block edge (odd
// segment offsets put 2-, 4- and 8-byte elements across every edge) must come out whole.
TEST(ChunkCodec, SparseElementsAcrossPatchBlockEdgesRoundTrip) {
  std::mt19937_64 rng(11);
  const size_t size = (256 << 10) + 13;
  const Bytes base = RandomBytes(rng, size);
  for (uint64_t lead : {1, 3, 5, 7}) {
    std::vector<Segment> segs{{lead, 1}, {70001, 8}, {60002, 4}, {50003, 2}};
    uint64_t covered = 0;
    for (const Segment& s : segs) covered += s.size;
    segs.push_back({size - covered, 2});
    Bytes target = base;
    // Change every byte within 16 bytes of each 4 KiB boundary, and a few percent elsewhere.
    for (size_t at = 4096; at < size; at += 4096) {
      for (size_t k = at - 16; k < std::min(size, at + 16); ++k) target[k] ^= 0x5A;
    }
    for (size_t k = 0; k < size; k += 1 + rng() % 64) target[k] += 1;
    for (Transform tr : {Transform::kSparse, Transform::kSparseDiff}) {
      ChunkEncodeOptions opt;
      opt.xor_transform = tr;
      opt.try_full_above = 2.0;
      EncodedChunk e;
      const Status s = RoundTrip(base, target, segs, opt, &e);
      ASSERT_TRUE(s.ok()) << s.ToString() << " lead " << lead;
      EXPECT_EQ(e.transform, tr);
    }
  }
}

// A payload may not make the decoder allocate more than a few chunks: a sparse stream longer than
// kMaxSparseStreamPerByte chunks is refused before anything is allocated, and the densest stream
// an encoder writes (every 1-byte element changed) is within the bound.
TEST(ChunkCodec, SparseStreamLengthIsBoundedBySmallMultipleOfTheChunk) {
  std::mt19937_64 rng(12);
  const Bytes base = RandomBytes(rng, 8192);
  Bytes target = base;
  for (auto& x : target) x = static_cast<uint8_t>(x + 1 + rng() % 200);
  const std::vector<Segment> segs{{8192, 1}};
  for (bool varint : {false, true}) {
    ChunkEncodeOptions opt;
    opt.xor_transform = Transform::kSparse;
    opt.varint_gaps = varint;
    opt.coder = Coder::kStored;
    opt.try_full_above = 2.0;
    EncodedChunk e;
    ASSERT_TRUE(RoundTrip(base, target, segs, opt, &e).ok());
    auto h = ParsePayloadHeader(e.payload);
    ASSERT_TRUE(h.ok());
    EXPECT_LE(h->stream_size, kMaxSparseStreamPerByte * h->chunk_size);
  }
  // A zstd payload declaring a stream just over the bound.
  for (size_t i = 0; i < target.size(); ++i) target[i] = static_cast<uint8_t>(base[i] + 1);
  ChunkEncodeOptions opt;
  opt.xor_transform = Transform::kSparseDiff;
  opt.try_full_above = 2.0;
  EncodedChunk e;
  ASSERT_TRUE(RoundTrip(base, target, segs, opt, &e).ok());
  ASSERT_EQ(e.coder, Coder::kZstd);
  Bytes bad = e.payload;
  const uint64_t lie = kMaxSparseStreamPerByte * 8192 + 32 + 1;
  for (int i = 0; i < 8; ++i) bad[24 + i] = static_cast<uint8_t>(lie >> (8 * i));
  auto h = ParsePayloadHeader(bad);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Code::kCorrupt);
  CodecScratch scratch;
  Bytes out(8192, 0x11);
  EXPECT_EQ(
      DecodeChunk(bad, HashedChunk::Compute(base, HashAlgorithm::kSha256), nullptr, out, scratch)
          .code(),
      Code::kCorrupt);
  EXPECT_EQ(out, Bytes(8192, 0x11));
}

TEST(ChunkCodec, PicksSameForIdenticalChunksAndSendsNothing) {
  std::mt19937_64 rng(1);
  const Bytes base = RandomBytes(rng, 4096);
  EncodedChunk e;
  ASSERT_TRUE(RoundTrip(base, base, std::vector<Segment>{{4096, 2}}, {}, &e).ok());
  EXPECT_EQ(e.encoding, ChunkEncoding::kSame);
  EXPECT_TRUE(e.payload.empty());
}

TEST(ChunkCodec, SparseXorIsMuchSmallerThanTheChunk) {
  std::mt19937_64 rng(2);
  const Bytes base = RandomBytes(rng, 1 << 20);
  const Bytes target = Mutate(rng, base, 0.01, 2);
  EncodedChunk e;
  ASSERT_TRUE(RoundTrip(base, target, std::vector<Segment>{{1 << 20, 2}}, {}, &e).ok());
  EXPECT_EQ(e.encoding, ChunkEncoding::kXor);
  EXPECT_EQ(e.transform, Transform::kSparseDiff);
  EXPECT_LT(e.payload.size(), (1u << 20) / 40);
}

TEST(ChunkCodec, UnrelatedChunksFallBackToFull) {
  std::mt19937_64 rng(3);
  Bytes base = RandomBytes(rng, 1 << 16);
  Bytes target(1 << 16, 0);  // compresses to nothing as full, not as xor of random base
  EncodedChunk e;
  ASSERT_TRUE(RoundTrip(base, target, std::vector<Segment>{{1 << 16, 1}}, {}, &e).ok());
  EXPECT_EQ(e.encoding, ChunkEncoding::kFull);
}

TEST(ChunkCodec, BaseOfOtherLengthGivesFull) {
  std::mt19937_64 rng(4);
  const Bytes base = RandomBytes(rng, 100);
  const Bytes target = RandomBytes(rng, 120);
  EncodedChunk e;
  ASSERT_TRUE(RoundTrip(base, target, std::vector<Segment>{{120, 4}}, {}, &e).ok());
  EXPECT_EQ(e.encoding, ChunkEncoding::kFull);
}

TEST(ChunkCodec, RejectsSegmentsThatDoNotCoverTheChunk) {
  CodecScratch scratch;
  Bytes a(64, 1), b(64, 2);
  const auto ha = HashedChunk::Compute(a, HashAlgorithm::kSha256);
  const auto hb = HashedChunk::Compute(b, HashAlgorithm::kSha256);
  std::vector<Segment> short_segs{{60, 2}};
  auto r = EncodeChunk(ha, hb, short_segs, {}, scratch);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  std::vector<Segment> bad_width{{64, 3}};
  EXPECT_FALSE(EncodeChunk(ha, hb, bad_width, {}, scratch).ok());
}

class DecodeFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(5);
    base_ = RandomBytes(rng, 8192);
    target_ = Mutate(rng, base_, 0.05, 2);
    segs_ = {{8192, 2}};
    CodecScratch scratch;
    auto e = EncodeChunk(HashedChunk::Compute(base_, HashAlgorithm::kSha256),
                         HashedChunk::Compute(target_, HashAlgorithm::kSha256), segs_, {}, scratch);
    ASSERT_TRUE(e.ok());
    ASSERT_EQ(e->encoding, ChunkEncoding::kXor);
    payload_ = e->payload;
  }
  Bytes base_, target_, payload_;
  std::vector<Segment> segs_;
};

TEST_F(DecodeFailure, RejectsWrongBaseWithFailedPreconditionAndLeavesOutputUntouched) {
  Bytes other = base_;
  other[100] ^= 1;
  CodecScratch scratch;
  Bytes out(target_.size(), 0xAB);
  const Status s = DecodeChunk(payload_, HashedChunk::Compute(other, HashAlgorithm::kSha256),
                               nullptr, out, scratch);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_EQ(out, Bytes(target_.size(), 0xAB));
}

TEST_F(DecodeFailure, RejectsBaseWhoseVouchedHashIsWrong) {
  // The bytes are right but the hash we vouch for names another chunk: still refused.
  Digest wrong{};
  CodecScratch scratch;
  Bytes out(target_.size(), 0xAB);
  const Status s =
      DecodeChunk(payload_, HashedChunk::FromVerifiedManifest(base_, wrong, HashAlgorithm::kSha256),
                  nullptr, out, scratch);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
}

TEST_F(DecodeFailure, RejectsPayloadForAnotherTarget) {
  Digest other{};
  other[0] = 1;
  CodecScratch scratch;
  Bytes out(target_.size());
  const Status s = DecodeChunk(payload_, HashedChunk::Compute(base_, HashAlgorithm::kSha256),
                               &other, out, scratch);
  EXPECT_EQ(s.code(), Code::kCorrupt);
}

TEST_F(DecodeFailure, EveryCorruptionGivesAnErrorAndNoPartialOutput) {
  CodecScratch scratch;
  const auto base = HashedChunk::Compute(base_, HashAlgorithm::kSha256);
  std::mt19937_64 rng(9);
  int failures = 0;
  for (size_t i = 0; i < payload_.size(); ++i) {
    for (uint8_t flip : {uint8_t{1}, uint8_t{0x80}}) {
      Bytes bad = payload_;
      bad[i] ^= flip;
      Bytes out(target_.size(), 0x5A);
      const Status s = DecodeChunk(bad, base, nullptr, out, scratch);
      if (s.ok()) {
        // A flip that still decodes must give exactly the target (e.g. a zstd checksum-free
        // literal that is never read). Anything else would be a silent corruption.
        EXPECT_EQ(out, target_) << "byte " << i;
        continue;
      }
      ++failures;
      EXPECT_TRUE(s.code() == Code::kCorrupt || s.code() == Code::kFailedPrecondition)
          << s.ToString();
      ASSERT_EQ(out, Bytes(target_.size(), 0x5A)) << "partial output after flip at " << i;
    }
  }
  EXPECT_GT(failures, 0);
  for (size_t cut = 0; cut < payload_.size(); cut += 1 + rng() % 7) {
    Bytes out(target_.size(), 0x5A);
    const Status s = DecodeChunk(std::span(payload_).first(cut), base, nullptr, out, scratch);
    EXPECT_FALSE(s.ok()) << "truncated to " << cut;
    ASSERT_EQ(out, Bytes(target_.size(), 0x5A));
  }
}

TEST_F(DecodeFailure, DecodeToBufferGivesTheSameBytesAndTheSameRefusals) {
  CodecScratch scratch;
  const auto base = HashedChunk::Compute(base_, HashAlgorithm::kSha256);
  std::vector<uint8_t> buffer;
  ASSERT_TRUE(DecodeChunkToBuffer(payload_, base, nullptr, target_.size(), buffer, scratch).ok());
  EXPECT_EQ(buffer, target_);
  Bytes bad = payload_;
  bad.back() ^= 1;
  EXPECT_FALSE(DecodeChunkToBuffer(bad, base, nullptr, target_.size(), buffer, scratch).ok());
  Bytes other = base_;
  other[0] ^= 1;
  EXPECT_EQ(DecodeChunkToBuffer(payload_, HashedChunk::Compute(other, HashAlgorithm::kSha256),
                                nullptr, target_.size(), buffer, scratch)
                .code(),
            Code::kFailedPrecondition);
}

// The one-pass decoders hand out bytes before the chunk's hash is checked: they must still refuse
// every corruption, wrong base and wrong target that DecodeChunk refuses (the caller relies on
// the status alone to decide whether the bytes count).
TEST_F(DecodeFailure, OnePassDecodersRefuseWhatDecodeChunkRefuses) {
  CodecScratch scratch;
  const auto base = HashedChunk::Compute(base_, HashAlgorithm::kSha256);
  auto sink_to = [](Bytes& out) {
    return [&out](uint64_t offset, std::span<const uint8_t> block) -> Status {
      if (offset + block.size() > out.size()) return Internal("block past the chunk");
      std::memcpy(out.data() + offset, block.data(), block.size());
      return Status::Ok();
    };
  };
  int refused = 0;
  for (size_t i = 0; i < payload_.size(); ++i) {
    Bytes bad = payload_;
    bad[i] ^= 0x10;
    Bytes ref(target_.size(), 0x5A), into(target_.size(), 0x5A), streamed(target_.size(), 0x5A);
    const Status want = DecodeChunk(bad, base, nullptr, ref, scratch);
    const Status got_into = DecodeChunkUnverifiedInto(bad, base, nullptr, into, scratch);
    const Status got_stream =
        DecodeChunkStreaming(bad, base, nullptr, target_.size(), sink_to(streamed), scratch);
    ASSERT_EQ(got_into.ok(), want.ok()) << "flip at " << i << ": " << got_into.ToString();
    ASSERT_EQ(got_stream.ok(), want.ok()) << "flip at " << i << ": " << got_stream.ToString();
    if (want.ok()) {
      EXPECT_EQ(into, target_);
      EXPECT_EQ(streamed, target_);
    } else {
      ++refused;
      EXPECT_EQ(got_into.code(), want.code());
      EXPECT_EQ(got_stream.code(), want.code());
    }
  }
  EXPECT_GT(refused, 0);
  Digest other{};
  other[0] = 1;
  Bytes out(target_.size());
  EXPECT_EQ(DecodeChunkUnverifiedInto(payload_, base, &other, out, scratch).code(), Code::kCorrupt);
  EXPECT_EQ(
      DecodeChunkStreaming(payload_, base, &other, target_.size(), sink_to(out), scratch).code(),
      Code::kCorrupt);
  Bytes wrong_base = base_;
  wrong_base[7] ^= 1;
  const auto wb = HashedChunk::Compute(wrong_base, HashAlgorithm::kSha256);
  EXPECT_EQ(DecodeChunkUnverifiedInto(payload_, wb, nullptr, out, scratch).code(),
            Code::kFailedPrecondition);
  EXPECT_EQ(
      DecodeChunkStreaming(payload_, wb, nullptr, target_.size(), sink_to(out), scratch).code(),
      Code::kFailedPrecondition);
}

// A payload whose stream is well formed but decodes to other bytes (here: a payload made against
// another base, with its base hash forged to ours) reaches the sink and still fails on the hash.
TEST_F(DecodeFailure, StreamingFailsOnTheHashAfterTheSinkSawEveryBlock) {
  std::mt19937_64 rng(21);
  Bytes other_base = base_;
  for (size_t k = 0; k < other_base.size(); k += 3) other_base[k] ^= 0x40;
  const Bytes other_target = Mutate(rng, other_base, 0.05, 2);
  CodecScratch scratch;
  auto e =
      EncodeChunk(HashedChunk::Compute(other_base, HashAlgorithm::kSha256),
                  HashedChunk::Compute(other_target, HashAlgorithm::kSha256), segs_, {}, scratch);
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->encoding, ChunkEncoding::kXor);
  Bytes forged = e->payload;
  const Digest our_base = HashedChunk::Compute(base_, HashAlgorithm::kSha256).hash();
  std::memcpy(forged.data() + 32, our_base.data(), our_base.size());  // base hash field
  uint64_t seen = 0;
  const Status s = DecodeChunkStreaming(
      forged, HashedChunk::Compute(base_, HashAlgorithm::kSha256), nullptr, target_.size(),
      [&](uint64_t, std::span<const uint8_t> block) {
        seen += block.size();
        return Status::Ok();
      },
      scratch);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_EQ(seen, target_.size());
  // A sink error stops decoding and is returned as is.
  const Status stopped = DecodeChunkStreaming(
      payload_, HashedChunk::Compute(base_, HashAlgorithm::kSha256), nullptr, target_.size(),
      [](uint64_t, std::span<const uint8_t>) { return IoError("disk gone"); }, scratch);
  EXPECT_EQ(stopped.code(), Code::kIoError);
}

TEST_F(DecodeFailure, RejectsOutputOfTheWrongSize) {
  CodecScratch scratch;
  Bytes out(target_.size() + 1);
  const Status s = DecodeChunk(payload_, HashedChunk::Compute(base_, HashAlgorithm::kSha256),
                               nullptr, out, scratch);
  EXPECT_EQ(s.code(), Code::kCorrupt);
}

TEST(ChunkCodec, FullPayloadDecodesWithoutABase) {
  std::mt19937_64 rng(6);
  const Bytes target = RandomBytes(rng, 5000);
  CodecScratch scratch;
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kXxh3_128);
  auto e = EncodeFullChunk(t, std::vector<Segment>{{5000, 4}}, {}, scratch);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->encoding, ChunkEncoding::kFull);
  Bytes out(5000);
  ASSERT_TRUE(DecodeChunk(e->payload, HashedChunk::Compute({}, HashAlgorithm::kXxh3_128), &t.hash(),
                          out, scratch)
                  .ok());
  EXPECT_EQ(out, target);
}

TEST(ChunkCodec, HeaderNamesBaseTargetAndLength) {
  std::mt19937_64 rng(8);
  const Bytes base = RandomBytes(rng, 3000);
  const Bytes target = Mutate(rng, base, 0.1, 4);
  CodecScratch scratch;
  const auto b = HashedChunk::Compute(base, HashAlgorithm::kSha256);
  const auto t = HashedChunk::Compute(target, HashAlgorithm::kSha256);
  auto e = EncodeChunk(b, t, std::vector<Segment>{{1000, 1}, {2000, 4}}, {}, scratch);
  ASSERT_TRUE(e.ok());
  auto h = ParsePayloadHeader(e->payload);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->base_hash, b.hash());
  EXPECT_EQ(h->target_hash, t.hash());
  EXPECT_EQ(h->chunk_size, 3000u);
  EXPECT_EQ(h->segments, (std::vector<Segment>{{1000, 1}, {2000, 4}}));
}

}  // namespace
}  // namespace weightcast::codec
