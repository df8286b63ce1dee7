// SourceDescriptorSet: a serialized google.protobuf.FileDescriptorSet of every .proto the
// server serves, written by protoc with --include_source_info, so that it keeps the comments
// (the descriptors compiled into the generated code drop them). Server reflection sends these,
// and grpcurl's `describe` then shows the comments. Built by proto/meson.build.
#ifndef RINGKV_PROTO_DESCRIPTOR_SET_H_
#define RINGKV_PROTO_DESCRIPTOR_SET_H_

#include <string_view>

namespace ringkv {

std::string_view SourceDescriptorSet();

}  // namespace ringkv

#endif  // RINGKV_PROTO_DESCRIPTOR_SET_H_
