#include "net/frame.h"

#include <gtest/gtest.h>

#include "net/handshake.h"

namespace weightcast::net {
namespace {

std::vector<uint8_t> Wire(const OutFrame& f) {
  std::vector<uint8_t> bytes(f.head.begin(), f.head.begin() + f.head_size);
  bytes.insert(bytes.end(), f.payload.begin(), f.payload.end());
  return bytes;
}

TEST(Frame, ChunkRoundTripsThroughDecoderInAnySplit) {
  std::vector<uint8_t> payload(1000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  ChunkHeader header{
      .version = 7, .channel = 3, .chunk_index = 42, .payload_length = 0, .encoding = 2};
  std::vector<uint8_t> wire = Wire(OutFrame::Chunk(header, payload, nullptr));
  ASSERT_EQ(wire.size(), kFrameHeaderSize + kChunkHeaderSize + payload.size());
  for (size_t split : {size_t{1}, size_t{7}, size_t{8}, size_t{31}, size_t{500}, wire.size()}) {
    FrameDecoder decoder(kDefaultMaxFrameBytes);
    ASSERT_TRUE(decoder.Feed(std::span(wire).first(split)).ok());
    ASSERT_TRUE(decoder.Feed(std::span(wire).subspan(split)).ok());
    auto frames = decoder.TakeFrames();
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].type, FrameType::kChunk);
    auto parsed = frames[0].chunk_header();
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    header.payload_length = 1000;
    EXPECT_EQ(*parsed, header);
    auto got = frames[0].chunk_payload();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), payload.begin(), payload.end()));
    EXPECT_EQ(decoder.buffered_bytes(), 0u);
  }
}

TEST(Frame, RejectsOversizedFrameBeforeReadingBody) {
  std::array<uint8_t, kFrameHeaderSize> head;
  EncodeFrameHeader({.length = 1u << 20, .type = FrameType::kControl}, head);
  auto parsed = ParseFrameHeader(head, 1u << 16);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), Code::kCorrupt);
  EXPECT_NE(parsed.status().message().find("exceeds the limit"), std::string::npos);
  // The absolute ceiling holds whatever the caller's limit.
  EncodeFrameHeader({.length = 0xffffffffu, .type = FrameType::kChunk}, head);
  EXPECT_FALSE(ParseFrameHeader(head, 0xffffffffu).ok());
}

TEST(Frame, RejectsUnknownTypeAndReservedBits) {
  std::array<uint8_t, kFrameHeaderSize> head{};
  head[4] = 99;
  EXPECT_FALSE(ParseFrameHeader(head, 1024).ok());
  head[4] = static_cast<uint8_t>(FrameType::kPing);
  EXPECT_TRUE(ParseFrameHeader(head, 1024).ok());
  head[6] = 1;
  EXPECT_FALSE(ParseFrameHeader(head, 1024).ok());
}

TEST(Frame, RejectsChunkWhoseLengthDisagreesWithFrame) {
  std::vector<uint8_t> body(kChunkHeaderSize + 10);
  EncodeChunkHeader(
      {.version = 1, .channel = 1, .chunk_index = 0, .payload_length = 11, .encoding = 0},
      std::span<uint8_t, kChunkHeaderSize>(body.data(), kChunkHeaderSize));
  auto parsed = ParseChunkHeader(body);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), Code::kCorrupt);
  EXPECT_FALSE(ValidateFrameBody(FrameType::kChunk, std::span(body).first(5)).ok());
}

TEST(Frame, DecoderStaysFailedAfterMalformedInput) {
  FrameDecoder decoder(1024);
  std::vector<uint8_t> garbage = {1, 0, 0, 0, static_cast<uint8_t>(FrameType::kPing), 0, 0, 0, 9};
  EXPECT_FALSE(decoder.Feed(garbage).ok());  // ping with a body
  std::vector<uint8_t> ping(kFrameHeaderSize);
  EncodeFrameHeader({.length = 0, .type = FrameType::kPing},
                    std::span<uint8_t, kFrameHeaderSize>(ping.data(), kFrameHeaderSize));
  EXPECT_FALSE(decoder.Feed(ping).ok());
  EXPECT_TRUE(decoder.TakeFrames().empty());
}

TEST(Frame, RejectsHelloThatIsNotProtobuf) {
  std::vector<uint8_t> body = {0xff, 0xff, 0xff};
  EXPECT_EQ(ValidateFrameBody(FrameType::kHello, body).code(), Code::kCorrupt);
}

TEST(Frame, RefusesToSendFramesNoReceiverAccepts) {
  std::vector<uint8_t> small(10);
  EXPECT_TRUE(CheckSendable(OutFrame::Make(FrameType::kControl, small)).ok());
  // A view, not an allocation: the size alone must be refused.
  std::span<const uint8_t> huge(small.data(), size_t{kAbsoluteMaxFrameBytes} + 1);
  EXPECT_EQ(CheckSendable(OutFrame::Chunk({}, huge, nullptr)).code(), Code::kOutOfRange);
}

}  // namespace
}  // namespace weightcast::net
