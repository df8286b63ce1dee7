#include "net/send_queue.h"

#include <algorithm>
#include <utility>

namespace ringkv {
namespace {

// Spent pieces are dropped from the front once there are this many.
constexpr size_t kSpentPieces = 16;

}  // namespace

// A copied piece that is also the last drops its consumed front once kCompactBytes are consumed
// and at least half of it (a long stream's buffer that never drains).
std::string& SendQueue::NewOrCompactedTail() {
  if (pieces_.empty() || pieces_.back().owner) return pieces_.emplace_back().copied;
  std::string& tail = pieces_.back().copied;
  if (head_ + 1 == pieces_.size() && offset_ >= kCompactBytes && offset_ * 2 >= tail.size()) {
    tail.erase(0, offset_);
    offset_ = 0;
  }
  return tail;
}

void SendQueue::Append(Shared owner, std::string_view bytes) {
  if (bytes.empty()) return;
  Piece& piece = pieces_.emplace_back();
  piece.from = static_cast<size_t>(bytes.data() - owner->data());
  piece.length = bytes.size();
  piece.owner = std::move(owner);
  size_ += bytes.size();
}

void SendQueue::MoveTo(SendQueue& to, size_t bytes, bool share) {
  bytes = std::min(bytes, size_);
  if (bytes == 0) return;
  const Piece& front = pieces_[head_];
  if (!front.owner && front.copied.size() - offset_ >= bytes) {  // Most calls: one copy.
    to.Append(std::string_view(front.copied).substr(offset_, bytes));
    return Consume(bytes);
  }
  size_t left = bytes;
  size_t skip = offset_;
  for (size_t i = head_; left > 0; ++i) {
    const Piece& piece = pieces_[i];
    const std::string_view from = piece.bytes().substr(skip);
    skip = 0;
    const std::string_view part = from.substr(0, std::min(left, from.size()));
    if (share && piece.owner && part.size() >= kMinSharedBytes) {
      to.Append(piece.owner, part);
    } else {
      to.Append(part);
    }
    left -= part.size();
  }
  Consume(bytes);
}

int SendQueue::Gather(iovec* iov, int max) const {
  int n = 0;
  size_t skip = offset_;
  for (size_t i = head_; i < pieces_.size() && n < max; ++i) {
    const std::string_view bytes = pieces_[i].bytes().substr(skip);
    skip = 0;
    if (bytes.empty()) continue;
    iov[n++] = {const_cast<char*>(bytes.data()), bytes.size()};
  }
  return n;
}

std::string_view SendQueue::Front() const {
  size_t skip = offset_;
  for (size_t i = head_; i < pieces_.size(); ++i) {
    const std::string_view bytes = pieces_[i].bytes().substr(skip);
    skip = 0;
    if (!bytes.empty()) return bytes;
  }
  return {};
}

void SendQueue::Truncate(size_t bytes) {
  if (bytes >= size_) return;
  if (bytes == 0) return Clear();
  size_ = bytes;
  size_t i = head_;
  bytes += offset_;
  for (;; ++i) {
    const size_t length = pieces_[i].bytes().size();
    if (bytes <= length) break;
    bytes -= length;
  }
  Piece& last = pieces_[i];
  if (last.owner) {
    last.length = bytes;
  } else {
    last.copied.resize(bytes);
  }
  pieces_.erase(pieces_.begin() + static_cast<ptrdiff_t>(i + 1), pieces_.end());
}

void SendQueue::Consume(size_t bytes) {
  bytes = std::min(bytes, size_);
  size_ -= bytes;
  if (size_ == 0) return Reset();
  while (bytes > 0) {
    Piece& piece = pieces_[head_];
    const size_t left = piece.bytes().size() - offset_;
    if (bytes < left) {
      offset_ += bytes;
      break;
    }
    bytes -= left;
    offset_ = 0;
    // Sent: the buffer may go (the first piece's is kept for Reset).
    if (piece.owner) {
      piece.owner.reset();
      piece.length = 0;
    } else if (head_ > 0) {
      std::string().swap(piece.copied);
    }
    ++head_;
  }
  if (head_ >= kSpentPieces) {
    pieces_.erase(pieces_.begin(), pieces_.begin() + static_cast<ptrdiff_t>(head_));
    head_ = 0;
  }
}

void SendQueue::Reset() {
  head_ = 0;
  offset_ = 0;
  if (pieces_.size() == 1 && !pieces_[0].owner && pieces_[0].copied.capacity() <= kKeptBytes) {
    pieces_[0].copied.clear();  // Most queues: one copied piece, kept as it is.
    return;
  }
  const auto kept = std::find_if(pieces_.begin(), pieces_.end(), [](const Piece& piece) {
    return !piece.owner && piece.copied.capacity() <= kKeptBytes;
  });
  if (kept == pieces_.end()) {
    pieces_.clear();
    return;
  }
  if (kept != pieces_.begin()) pieces_.front() = std::move(*kept);
  pieces_.erase(pieces_.begin() + 1, pieces_.end());
  pieces_.front().copied.clear();
}

}  // namespace ringkv
