// hpack-bench: ringkv's HPACK (net/hpack.h) against nghttp2's, per header block, on the blocks a
// gRPC call sends (issue 25: nghttp2's header work is a fifth of its share of a call's CPU).
//
// Workloads, each timed for both implementations in turn, ROUNDS rounds of ITERATIONS blocks:
//   decode-ringkv-client  the request headers of ringkv's own clients (the CLI, the loadgen, a
//                         replica: nghttp2's deflater, which never indexes :path), a warm table
//   decode-grpc-client    the same with a grpc++ client's extra headers (user-agent,
//                         grpc-accept-encoding), its :path indexed as chttp2 does
//   encode-response       the server's response headers and trailers for a call that succeeded
//                         (:status, content-type, grpc-accept-encoding; grpc-status), a warm table
// Prints nanoseconds per block: the median of the rounds, with min and max.
//
// Usage: build/bench/hpack-bench [ROUNDS=5] [ITERATIONS=1000000]
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "net/hpack.h"

namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

std::vector<nghttp2_nv> Nva(const Fields& fields, uint8_t flags) {
  std::vector<nghttp2_nv> nva;
  for (const auto& [n, v] : fields) {
    nva.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                   reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                   flags});
  }
  return nva;
}

// The second block of `fields` from nghttp2's deflater: what a client sends once its table is
// warm. `index_path`: :path indexed by hand (chttp2 does; nghttp2's deflater never does).
std::pair<std::string, std::string> WarmBlocks(const Fields& fields, bool index_path) {
  nghttp2_hd_deflater* d;
  nghttp2_hd_deflate_new(&d, 4096);
  std::vector<nghttp2_nv> nva = Nva(fields, NGHTTP2_NV_FLAG_NONE);
  std::string blocks[2];
  for (std::string& block : blocks) {
    block.resize(nghttp2_hd_deflate_bound(d, nva.data(), nva.size()));
    const ssize_t n = nghttp2_hd_deflate_hd(d, reinterpret_cast<uint8_t*>(block.data()),
                                            block.size(), nva.data(), nva.size());
    if (n < 0) std::abort();
    block.resize(n);
  }
  nghttp2_hd_deflate_del(d);
  if (index_path) {
    // First block: a literal with incremental indexing of :path (static name 4) in front;
    // second: its dynamic index (62, the newest) in front of the rest.
    std::string path;
    for (const auto& [n, v] : fields) {
      if (n == ":path") path = v;
    }
    const std::string first = std::string(1, '\x44') + static_cast<char>(path.size()) + path;
    blocks[0] = first + blocks[0];
    blocks[1] = std::string(1, '\xbe') + blocks[1];
  }
  return {blocks[0], blocks[1]};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Report(const char* workload, const char* impl, const std::vector<double>& ns) {
  std::printf("| %s | %s | %.1f | %.1f .. %.1f |\n", workload, impl, Median(ns),
              *std::min_element(ns.begin(), ns.end()), *std::max_element(ns.begin(), ns.end()));
}

// Nanoseconds per call of `body`, `iterations` calls.
double Time(long iterations, const std::function<void()>& body) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) body();
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(end - start).count() / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const long iterations = argc > 2 ? std::atol(argv[2]) : 1000000;
  const Fields ringkv_client = {{":method", "POST"},
                                {":scheme", "http"},
                                {":path", "/ringkv.v1.KV/Get"},
                                {":authority", "127.0.0.1:7411"},
                                {"content-type", "application/grpc"},
                                {"te", "trailers"}};
  Fields grpc_client = ringkv_client;
  grpc_client.erase(grpc_client.begin() + 2);  // :path goes in front, indexed
  grpc_client.emplace_back("user-agent", "grpc-c++/1.51.1 grpc-c/29.0.0 (linux; chttp2)");
  grpc_client.emplace_back("grpc-accept-encoding", "identity,deflate,gzip");
  const Fields response = {{":status", "200"},
                           {"content-type", "application/grpc"},
                           {"grpc-accept-encoding", "identity"}};
  const Fields trailers = {{"grpc-status", "0"}};

  std::printf(
      "| workload | implementation | ns per block, median | min .. max |\n|---|---|---|---|\n");
  size_t sink = 0;
  struct Decode {
    const char* name;
    std::pair<std::string, std::string> blocks;
  };
  std::vector<Decode> decodes = {
      {"decode-ringkv-client", WarmBlocks(ringkv_client, false)},
      {"decode-grpc-client", WarmBlocks(grpc_client, true)},
  };
  for (const Decode& d : decodes) {
    std::vector<double> ours, theirs;
    for (int r = 0; r < rounds; ++r) {
      ringkv::HpackDecoder decoder;
      auto on_field = [&](std::string_view n, std::string_view v) { sink += n.size() + v.size(); };
      if (!decoder.Decode(d.blocks.first, on_field).ok()) std::abort();
      ours.push_back(Time(iterations, [&] {
        if (!decoder.Decode(d.blocks.second, on_field).ok()) std::abort();
      }));
      nghttp2_hd_inflater* inflater;
      nghttp2_hd_inflate_new(&inflater);
      auto inflate = [&](const std::string& block) {
        auto* in = reinterpret_cast<uint8_t*>(const_cast<char*>(block.data()));
        size_t left = block.size();
        for (;;) {
          nghttp2_nv nv;
          int flags = 0;
          const ssize_t n = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, in, left, 1);
          if (n < 0) std::abort();
          in += n;
          left -= n;
          if (flags & NGHTTP2_HD_INFLATE_EMIT) sink += nv.namelen + nv.valuelen;
          if (flags & NGHTTP2_HD_INFLATE_FINAL) break;
        }
        nghttp2_hd_inflate_end_headers(inflater);
      };
      inflate(d.blocks.first);
      theirs.push_back(Time(iterations, [&] { inflate(d.blocks.second); }));
      nghttp2_hd_inflate_del(inflater);
    }
    Report(d.name, "ringkv", ours);
    Report(d.name, "nghttp2", theirs);
  }

  std::vector<double> ours, theirs;
  for (int r = 0; r < rounds; ++r) {
    ringkv::HpackEncoder encoder;
    std::string out;
    auto encode = [&] {
      out.clear();
      encoder.BeginBlock(&out);
      for (const auto& [n, v] : response) encoder.Encode(n, v, ringkv::HpackEncoder::kIndex, &out);
      encoder.BeginBlock(&out);
      for (const auto& [n, v] : trailers) encoder.Encode(n, v, ringkv::HpackEncoder::kIndex, &out);
      sink += out.size();
    };
    encode();
    ours.push_back(Time(iterations, encode));
    nghttp2_hd_deflater* deflater;
    nghttp2_hd_deflate_new(&deflater, 4096);
    std::vector<nghttp2_nv> nva_response =
        Nva(response, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE);
    std::vector<nghttp2_nv> nva_trailers =
        Nva(trailers, NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE);
    uint8_t buf[256];
    auto deflate = [&] {
      sink += nghttp2_hd_deflate_hd(deflater, buf, sizeof(buf), nva_response.data(),
                                    nva_response.size());
      sink += nghttp2_hd_deflate_hd(deflater, buf, sizeof(buf), nva_trailers.data(),
                                    nva_trailers.size());
    };
    deflate();
    theirs.push_back(Time(iterations, deflate));
    nghttp2_hd_deflate_del(deflater);
  }
  Report("encode-response", "ringkv", ours);
  Report("encode-response", "nghttp2", theirs);
  std::fprintf(stderr, "(%zu)\n", sink);
  return 0;
}
