#include "net/send_queue.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace ringkv {
namespace {

// What Gather hands out, joined.
std::string Gathered(const SendQueue& q) {
  iovec iov[SendQueue::kMaxIovecs];
  const int n = q.Gather(iov);
  std::string out;
  for (int i = 0; i < n; ++i) out.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  return out;
}

SendQueue::Shared Buffer(size_t bytes, char fill) {
  return std::make_shared<const SharedBytes>(std::string(bytes, fill));
}

TEST(SendQueue, CopiedBytesAreOnePiece) {
  SendQueue q;
  q.Append("abc");
  std::memcpy(q.AppendSpace(3), "def", 3);
  q.Append("gh");
  iovec iov[4];
  ASSERT_EQ(q.Gather(iov, 4), 1);
  EXPECT_EQ(q.size(), 8u);
  EXPECT_EQ(Gathered(q), "abcdefgh");
  q.Consume(5);
  EXPECT_EQ(q.Front(), "fgh");
  q.Consume(3);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.Gather(iov, 4), 0);
}

TEST(SendQueue, SharedBytesAreReferencedNotCopied) {
  SendQueue q;
  const SendQueue::Shared value = Buffer(10000, 'v');
  q.Append("head");
  q.Append(value, value->view());
  q.Append("tail");
  iovec iov[4];
  ASSERT_EQ(q.Gather(iov, 4), 3);
  EXPECT_EQ(iov[1].iov_base, value->data());  // The value's own bytes: no copy.
  EXPECT_EQ(value.use_count(), 2);
  q.Consume(4 + 10000);
  EXPECT_EQ(value.use_count(), 1);  // Sent: the queue lets go at once.
  EXPECT_EQ(Gathered(q), "tail");
}

// Bytes lent where they lie (a shard's record, Table::Loan), which their lender copies out
// before it changes them: the queue reads them where they are now.
class Lent : public SharedBytes {
 public:
  explicit Lent(std::string_view bytes) : SharedBytes(bytes) {}
  void MoveOut() { Own(); }
};

TEST(SendQueue, LentBytesAreReadFromWhereTheyAreNow) {
  std::string record(20000, 'r');
  record.replace(0, 10, "0123456789");
  const auto lent = std::make_shared<Lent>(record);
  SendQueue q;
  SendQueue to;
  q.Append("head");
  q.Append(lent, lent->view().substr(5));
  q.Append("tail");
  q.Consume(4 + 1);     // Partly sent.
  q.MoveTo(to, 10000);  // A call's framed response into its connection's output: shared.
  q.Truncate(q.size() - 2);
  iovec iov[4];
  ASSERT_EQ(to.Gather(iov, 4), 1);
  EXPECT_EQ(iov[0].iov_base, record.data() + 6);  // Lent: no copy.
  lent->MoveOut();
  record.assign(20000, 'x');  // Changed by its lender, once copied out.
  EXPECT_TRUE(!lent->lent());
  ASSERT_EQ(to.Gather(iov, 4), 1);
  EXPECT_EQ(iov[0].iov_base, lent->data() + 6);
  EXPECT_EQ(Gathered(to), "6789" + std::string(10000 - 4, 'r'));
  EXPECT_EQ(Gathered(q), std::string(20000 - 10006, 'r') + "ta");
  to.Consume(10000);
  q.Clear();
  EXPECT_EQ(lent.use_count(), 1);
}

TEST(SendQueue, MoveToSharesLongRangesAndCopiesShortOnes) {
  SendQueue call;
  const SendQueue::Shared value = Buffer(3 * 16384 + 100, 'x');
  call.Append("prefix");
  call.Append(value, value->view());
  call.Append("fields");
  SendQueue out;
  // Frames as nghttp2 cuts them: 16,384 bytes at most, each after a 9-byte header.
  std::string expected;
  const std::string all = "prefix" + std::string(value->view()) + "fields";
  size_t at = 0;
  while (!call.empty()) {
    out.Append("HEADER123");
    const size_t n = std::min<size_t>(16384, call.size());
    call.MoveTo(out, n);
    expected += "HEADER123" + all.substr(at, n);
    at += n;
  }
  EXPECT_EQ(at, all.size());
  EXPECT_EQ(out.size(), expected.size());
  iovec iov[SendQueue::kMaxIovecs];
  const int n = out.Gather(iov);
  size_t shared = 0;
  for (int i = 0; i < n; ++i) {
    const char* base = static_cast<const char*>(iov[i].iov_base);
    if (base >= value->data() && base < value->data() + value->size()) shared += iov[i].iov_len;
  }
  // All but the last 106 bytes ("prefix"'s shift leaves 100 + 6 in the last frame) are shared.
  EXPECT_EQ(shared, value->size() - 106);
  EXPECT_EQ(Gathered(out), expected);
}

TEST(SendQueue, ConsumesAcrossPiecesInAnyStepsAndKeepsItsBuffer) {
  std::mt19937 rng(7);
  SendQueue q;
  std::string expected;
  for (int round = 0; round < 200; ++round) {
    const int what = static_cast<int>(rng() % 3);
    if (what == 0) {
      const std::string bytes(rng() % 50, static_cast<char>('a' + round % 26));
      q.Append(bytes);
      expected += bytes;
    } else if (what == 1) {
      const SendQueue::Shared b = Buffer(rng() % 5000, static_cast<char>('A' + round % 26));
      q.Append(b, b->view().substr(b->size() / 3));
      expected += b->view().substr(b->size() / 3);
    } else if (!expected.empty()) {
      ASSERT_EQ(q.Front(), std::string_view(expected).substr(0, q.Front().size()));
      const size_t n = rng() % (expected.size() + 1);
      q.Consume(n);
      expected.erase(0, n);
    }
    ASSERT_EQ(q.size(), expected.size());
    if (expected.size() < 4000) {
      const std::string gathered = Gathered(q);
      ASSERT_EQ(gathered, expected.substr(0, gathered.size()));
    }
  }
  q.Clear();
  EXPECT_TRUE(q.empty());
  q.Append("again");
  EXPECT_EQ(Gathered(q), "again");
}

TEST(SendQueue, MoveToCopiesSharedRangesWhenToldNotToShare) {
  SendQueue from;
  const SendQueue::Shared value = Buffer(20000, 'y');
  from.Append(value, value->view());
  SendQueue to;
  from.MoveTo(to, 16384, /*share=*/false);
  iovec iov[4];
  ASSERT_EQ(to.Gather(iov, 4), 1);
  EXPECT_NE(iov[0].iov_base, value->data());  // A copy, for a writer that copies anyway.
  EXPECT_EQ(Gathered(to), value->view().substr(0, 16384));
  EXPECT_EQ(from.size(), 20000u - 16384u);
}

TEST(SendQueue, TruncateKeepsTheFrontAcrossPieces) {
  const SendQueue::Shared value = Buffer(5000, 's');
  for (size_t keep : {size_t{0}, size_t{3}, size_t{4}, size_t{2000}, size_t{5004}, size_t{5006},
                      size_t{5010}, size_t{9999}}) {
    SendQueue q;
    q.Append("ab");
    q.Append("cd");  // One copied piece "abcd" ...
    q.Append(value, value->view());
    q.Append("tail!!");
    const std::string all = "abcd" + std::string(value->view()) + "tail!!";
    q.Consume(1);  // ... partly sent.
    q.Truncate(keep);
    const std::string expected = all.substr(1, keep);
    EXPECT_EQ(q.size(), expected.size()) << keep;
    EXPECT_EQ(Gathered(q), expected) << keep;
    q.Append("more");
    EXPECT_EQ(Gathered(q), expected + "more") << keep;
  }
}

TEST(SendQueue, SpentPiecesDoNotPileUpWhileTheQueueNeverDrains) {
  // A slow reader: every send takes part of a piece, and more comes before the queue is empty.
  SendQueue q;
  const SendQueue::Shared value = Buffer(16384, 'd');
  q.Append("x");
  for (int i = 0; i < 10000; ++i) {
    q.Append("123456789");
    q.Append(value, value->view());
    q.Consume(16384 + 9 - 7);  // Leaves the queue 7 bytes further behind each round.
  }
  EXPECT_EQ(q.size(), 1u + 10000u * 7u);
  EXPECT_LT(q.pieces(), 64u);
  // Only the pieces still unsent hold the buffer (and the test's own reference).
  EXPECT_LE(value.use_count(), 1 + static_cast<long>(q.size() / 16384) + 2);
}

TEST(SendQueue, GathersAtMostMaxPieces) {
  SendQueue q;
  const SendQueue::Shared b = Buffer(100, 's');
  for (int i = 0; i < 100; ++i) {
    q.Append("h");
    q.Append(b, b->view());
  }
  iovec iov[SendQueue::kMaxIovecs];
  EXPECT_EQ(q.Gather(iov), SendQueue::kMaxIovecs);
  EXPECT_EQ(q.size(), 100u * 101u);
}

TEST(SendQueue, SendmsgOfTheGatheredFrontDeliversTheBytesInOrder) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  SendQueue q;
  const SendQueue::Shared b = Buffer(30000, 'z');
  q.Append("<");
  q.Append(b, b->view());
  q.Append(">");
  std::string received;
  while (!q.empty()) {
    iovec iov[SendQueue::kMaxIovecs];
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(q.Gather(iov));
    const ssize_t sent = sendmsg(fds[0], &message, 0);
    ASSERT_GT(sent, 0);
    q.Consume(static_cast<size_t>(sent));
    char buffer[65536];
    const ssize_t got = read(fds[1], buffer, sizeof(buffer));
    ASSERT_GT(got, 0);
    received.append(buffer, static_cast<size_t>(got));
  }
  while (received.size() < 30002) {
    char buffer[65536];
    const ssize_t got = read(fds[1], buffer, sizeof(buffer));
    ASSERT_GT(got, 0);
    received.append(buffer, static_cast<size_t>(got));
  }
  EXPECT_EQ(received, "<" + std::string(b->view()) + ">");
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace ringkv
