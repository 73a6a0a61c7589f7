#include "origin/listing.h"

#include <gtest/gtest.h>

#include "origin/http_client.h"

namespace weightcast::origin {
namespace {

TEST(OriginUrl, NamesOneSafetensorsFile) {
  auto spec = ParseOriginUrl("https://models.example/org/m/model.safetensors");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->files.size(), 1u);
  EXPECT_EQ(spec->files[0].name, "model.safetensors");
  EXPECT_TRUE(spec->index_url.empty());
}

TEST(OriginUrl, AnIndexOrADirectoryNamesTheIndex) {
  auto index = ParseOriginUrl("http://h:8080/r/resolve/main/model.safetensors.index.json");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->index_name, "model.safetensors.index.json");
  EXPECT_TRUE(index->files.empty());
  auto dir = ParseOriginUrl("http://h/r/resolve/main/");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->index_url, "http://h/r/resolve/main/model.safetensors.index.json");
}

TEST(OriginUrl, RefusesOtherSchemesAndOtherFiles) {
  EXPECT_EQ(ParseOriginUrl("ftp://h/m.safetensors").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseOriginUrl("http://h").status().code(), Code::kInvalidArgument);
  auto other = ParseOriginUrl("http://h/config.json?sig=SECRET");
  EXPECT_EQ(other.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(other.status().message().find("SECRET"), std::string::npos);
}

TEST(UrlList, TakesNamedAndUnnamedLinesAndComments) {
  auto files = ParseUrlList(
      "# shards of the model\n"
      "a.safetensors https://bucket.example/x/a.safetensors?X-Sig=1\n"
      "\n"
      "  https://bucket.example/x/sub/b.safetensors?X-Sig=2  \r\n",
      "list");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].name, "a.safetensors");
  EXPECT_EQ((*files)[0].url, "https://bucket.example/x/a.safetensors?X-Sig=1");
  EXPECT_EQ((*files)[1].name, "b.safetensors");
}

TEST(UrlList, RefusesBadLinesNamingTheLine) {
  auto dup = ParseUrlList("a http://h/1\na http://h/2\n", "list");
  EXPECT_EQ(dup.status().code(), Code::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("list:2"), std::string::npos);
  EXPECT_FALSE(ParseUrlList("../etc/passwd http://h/1\n", "list").ok());
  EXPECT_FALSE(ParseUrlList("a file:///etc/passwd\n", "list").ok());
  EXPECT_FALSE(ParseUrlList("a http://h/1 extra\n", "list").ok());
  EXPECT_FALSE(ParseUrlList("# nothing\n", "list").ok());
}

TEST(OriginObjects, RoundTripAndRefuseBadLines) {
  std::vector<OriginObject> objects = {
      {"a.safetensors", "https://h/a.safetensors?sig=x", {123, "\"e1\"", "Mon, 07 Dec 2026"}},
      {"sub/b.json", "http://h/b.json", {0, "", ""}}};
  auto parsed = ParseOriginObjects(EncodeOriginObjects(objects));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].url, objects[0].url);
  EXPECT_EQ((*parsed)[0].info.size, 123u);
  EXPECT_EQ((*parsed)[0].info.etag, "\"e1\"");
  EXPECT_EQ((*parsed)[1].name, "sub/b.json");
  EXPECT_FALSE(ParseOriginObjects("a\t1\t\t\n").ok());
  EXPECT_FALSE(ParseOriginObjects("a\tx\t\t\thttp://h/a\n").ok());
  EXPECT_FALSE(ParseOriginObjects("../a\t1\t\t\thttp://h/a\n").ok());
  EXPECT_FALSE(ParseOriginObjects("a\t1\t\t\tfile:///a\n").ok());
}

TEST(FileName, AcceptsRelativePathsOnly) {
  EXPECT_TRUE(CheckFileName("model-00001-of-00002.safetensors").ok());
  EXPECT_TRUE(CheckFileName("sub/dir/a.json").ok());
  for (const char* bad : {"", "/abs", "a//b", "a/../b", ".", "a b", "a\\b", "x/"}) {
    EXPECT_FALSE(CheckFileName(bad).ok()) << bad;
  }
}

TEST(SiblingUrl, ReplacesTheLastSegmentAndDropsTheQuery) {
  EXPECT_EQ(SiblingUrl("http://h/a/b/index.json?x=1", "s.safetensors"),
            "http://h/a/b/s.safetensors");
}

TEST(RedactUrl, LeavesOutQueryAndCredentials) {
  EXPECT_EQ(RedactUrl("https://user:pw@h/a?X-Amz-Signature=abc"), "https://h/a?...");
  EXPECT_EQ(RedactUrl("http://h/a"), "http://h/a");
}

TEST(Backoff, DoublesUpToTheCapAndJitters) {
  using std::chrono::milliseconds;
  EXPECT_EQ(BackoffDelay(1, milliseconds(100), milliseconds(1000), 1.0), milliseconds(100));
  EXPECT_EQ(BackoffDelay(3, milliseconds(100), milliseconds(1000), 1.0), milliseconds(400));
  EXPECT_EQ(BackoffDelay(30, milliseconds(100), milliseconds(1000), 1.0), milliseconds(1000));
  EXPECT_EQ(BackoffDelay(3, milliseconds(100), milliseconds(1000), 0.5), milliseconds(200));
  EXPECT_TRUE(RetryableHttpStatus(503));
  EXPECT_TRUE(RetryableHttpStatus(429));
  EXPECT_FALSE(RetryableHttpStatus(404));
}

}  // namespace
}  // namespace weightcast::origin
